// The consumer's half of one RecvTensor exchange, whichever driver runs the
// gRPC call (control/recv_tensor_call.h: on gRPC's threads for RecvAsync, on
// the caller's for the blocking Recv). The driver feeds it the answer's
// messages and the call's end; the exchange decodes, runs the side transfer
// the answer describes (data plane or CUDA IPC), joins the call's end with
// the transfer's, lets the producer free what was read, and brings the
// tensor to its destination device.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/support/byte_buffer.h>
#include <grpcpp/support/status.h>

#include "absl/functional/any_invocable.h"
#include "control/data_plane.h"
#include "control/side_transfer.h"
#include "control/tensor_codec.h"
#include "control/worker_cache.h"
#include "core/chunked_copy.h"
#include "core/device_copy.h"
#include "core/memory.h"

namespace rdv::control {

// Copies a GPU-bound payload that arrives in the stream (into pinned
// memory) to the device chunk by chunk as it arrives, so that the copy
// overlaps the wire.
class StreamUpload {
 public:
  // After each chunk the decoder consumed.
  void Advance(const TensorDecoder& decoder, MemoryLocation destination);
  // The upload to finish, or null when the tensor did not go this way.
  std::unique_ptr<ChunkedUpload> Take() { return std::move(upload_); }

 private:
  bool decided_ = false;
  std::unique_ptr<ChunkedUpload> upload_;
};

// Whether a received value must still be copied to `destination`: a live,
// initialized tensor that is somewhere else, bound for a GPU (a host
// destination takes the tensor where it landed).
bool NeedsCopyTo(MemoryLocation destination, const Tensor& tensor, bool is_dead);

// A device copy's callback that ends a Recv with the copy's outcome.
CopyTensorDone EndWhenCopied(absl::AnyInvocable<void(absl::Status, Tensor, bool) &&> done);

class RecvExchange : public std::enable_shared_from_this<RecvExchange> {
 public:
  // Runs once, when the call has ended and the side transfer (if any) too,
  // with the tensor at its destination; or at the call's failure, at once.
  // It runs on the thread that ended the last of them: gRPC's, the
  // driver's, the transport's, CUDA's or the peer watch's.
  using Done = absl::AnyInvocable<void(absl::Status, Tensor, bool is_dead) &&>;

  // `data_plane` (null for protocol grpc) must outlive the exchange.
  // `landing`: the Recv's RendezvousArgs::landing (may be null).
  static std::shared_ptr<RecvExchange> Create(std::shared_ptr<WorkerClient> worker,
                                              DataPlane* data_plane,
                                              const RecvTensorRequest& request,
                                              MemoryLocation destination, Done done,
                                              std::shared_ptr<Buffer> landing = nullptr);

  // One message of the answer, in order; once the answer is whole and
  // describes a side transfer, starts it. An error is the driver's to end
  // the call with (Abort). One message at a time.
  absl::Status Consume(grpc::ByteBuffer* message);
  // Meta and every streamed payload byte have arrived.
  bool complete() const { return decoder_->complete(); }
  // The producer holds the value for a second, fetch_held call.
  bool held() const { return decoder_->held(); }
  uint64_t received_bytes() const { return decoder_->received_bytes(); }
  uint64_t payload_bytes() const { return decoder_->meta().payload_bytes(); }
  // The answer comes again, whole, from the fetch_held call `fetch`.
  void Refetch(const RecvTensorRequest& fetch);

  // The gRPC call ended with `status`. Finishes the exchange now, unless
  // the call succeeded and its side transfer is still on its way: a tagged
  // one must then arrive within the peer timeout.
  void CallEnded(const grpc::Status& status);

  // The first abort's status is the exchange's; the side transfer is asked
  // to end. `done` never runs here, so the caller may hold locks that its
  // detaching takes.
  void Abort(const absl::Status& status);
  // Abort(), and the side transfer ends now: `done` may run here.
  void AbortNow(const absl::Status& status);

 private:
  RecvExchange(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
               const RecvTensorRequest& request, MemoryLocation destination, Done done,
               std::shared_ptr<Buffer> landing);

  std::unique_ptr<TensorDecoder> MakeDecoder(const RecvTensorRequest& request) const;
  void StartSideTransfer();
  void SideTransferEnded(absl::Status status);
  void Abort(const absl::Status& status, bool end_now);
  // Ends `side` for the abort that stopped it: now, or by the transport.
  void EndForAbort(SideTransfer& side, const absl::Status& status, bool end_now);
  // Both halves ended (or the call failed): the tensor to its destination.
  void Finish(absl::Status status);
  // Keeps the fast-path id the producer gave for the key (control/fast_keys.h).
  void LearnFastKey(WorkerClient& worker, const Tensor& tensor) const;
  void MoveToDestination(Tensor tensor, bool is_dead);

  std::shared_ptr<WorkerClient> worker_;  // let go of by Finish, before `done`
  DataPlane* const data_plane_;
  const std::string key_;
  const int64_t step_id_;
  const MemoryLocation destination_;
  const std::shared_ptr<Buffer> landing_;
  Done done_;
  // Touched by one Consume at a time, then by Finish once all has ended.
  std::unique_ptr<TensorDecoder> decoder_;
  StreamUpload upload_;

  std::mutex mu_;
  absl::Status abort_status_;           // mu_
  bool end_side_now_ = false;           // mu_: an abort was AbortNow
  bool side_started_ = false;           // mu_
  std::shared_ptr<SideTransfer> side_;  // mu_: once started
  bool side_ended_ = false;             // mu_
  absl::Status side_status_;            // mu_
  bool call_ended_ = false;             // mu_
  bool finished_ = false;               // mu_: Finish has run or runs
};

}  // namespace rdv::control
