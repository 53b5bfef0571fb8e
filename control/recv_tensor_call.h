// RecvTensor calls from a consumer to a producer: each sends the request,
// decodes the response stream straight into a new host tensor, then (for a
// GPU destination) copies it to the device; or copies a tensor the producer
// lent by CUDA IPC straight into device memory. RecvTensorCall runs on gRPC's
// threads and deletes itself; BlockingRecvTensorCall runs on the caller's
// thread (the blocking Recv), one thread handoff shorter.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include <grpcpp/support/client_callback.h>

#include "absl/functional/any_invocable.h"
#include "control/data_plane.h"
#include "control/tensor_codec.h"
#include "control/worker_cache.h"
#include "core/chunked_copy.h"
#include "core/memory.h"

namespace rdv::control {

struct FetchJoin;

// The copy a RecvTensor answer described (a data-plane transfer or CUDA
// IPC) into the decoder's tensor, bounded by its producer's life: `done`
// runs once, at the first of the copy's end, End(), and the producer's loss
// (PeerWatch), which aborts the data plane's endpoint to it. A copy ended
// early keeps its destination alive until the transport lets go of it.
class SideTransfer {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;

  // `done` runs on the transport's, CUDA's or the watch's thread, or here
  // when the copy cannot start. `data_plane` must outlive the transfer.
  static std::shared_ptr<SideTransfer> Start(std::shared_ptr<WorkerClient> worker,
                                             DataPlane* data_plane, const TensorDecoder& decoder,
                                             Done done);

  // Asks the transport to end it early (a tagged receive no send matched
  // yet); `done` then runs on the transport's thread. Safe under the
  // caller's locks.
  void Cancel();
  // Cancel(), and ends it now with `status`: `done` runs here.
  void End(absl::Status status);
  // The producer says its part is over. A tagged send completes only once
  // its bytes left, so they must arrive within `limit` (else DATA_LOSS); a
  // get reads for as long as it takes.
  void ExpectArrivalWithin(absl::Duration limit);

 private:
  SideTransfer(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane, Done done);
  void TransportDone(absl::Status status);
  // From the watch: the producer is lost, or the arrival limit passed.
  void Told(const absl::Status& status);
  // True for the one caller that ends it.
  bool Claim();
  void Unwatch();

  const std::shared_ptr<WorkerClient> worker_;  // for its watch
  DataPlane* const data_plane_;
  TransportDescriptor descriptor_;  // set before the fetch starts; empty for CUDA IPC
  Done done_;
  std::mutex mu_;
  bool ended_ = false;          // mu_
  bool producer_lost_ = false;  // mu_
  uint64_t watch_id_ = 0;       // mu_: 0 when not watched
  absl::Duration arrival_limit_;  // mu_
};

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

// What a step's rendezvous can do to a call in flight.
class AbortableCall {
 public:
  virtual ~AbortableCall() = default;
  // Ends the call early; the Recv completes with `status` (the first
  // given). Any thread, until the call is untracked.
  virtual void Abort(const absl::Status& status) = 0;
};

class RecvTensorCall final : public AbortableCall,
                             public grpc::ClientReadReactor<grpc::ByteBuffer> {
 public:
  // Runs once, on a gRPC or CUDA completion thread, after the call ended.
  using Done = absl::AnyInvocable<void(absl::Status, Tensor, bool is_dead) &&>;
  // Runs on the same thread right before `done`, to unhook the call from
  // whoever may Abort it; after it returns nobody calls Abort again.
  using Detach = absl::AnyInvocable<void(AbortableCall*) &&>;

  // `data_plane` (null for protocol grpc) must outlive the call.
  RecvTensorCall(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                 RecvTensorRequest request, MemoryLocation destination, Detach detach, Done done);

  // Starts the call; the object owns itself from here.
  void Start();

  void Abort(const absl::Status& status) override;

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  absl::Status FinalStatus(const grpc::Status& status);
  void StartFetch();
  // The stream ended well while the transfer it described goes on.
  void ExpectArrival();
  void CancelSideTransfer();
  void Finish();
  void Complete(absl::Status status, Tensor tensor, bool is_dead);

  std::shared_ptr<WorkerClient> worker_;
  const std::shared_ptr<CallsInFlight> calls_;  // of worker_, Ended after it is dropped
  DataPlane* const data_plane_;
  const std::shared_ptr<FetchJoin> join_;
  const RecvTensorRequest request_;
  const MemoryLocation destination_;
  Detach detach_;
  Done done_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_buffer_;
  grpc::ByteBuffer response_;
  TensorDecoder decoder_;  // touched by one reaction or completion at a time
  StreamUpload upload_;    // likewise
  std::mutex mu_;
  absl::Status abort_status_;            // guarded by mu_
  std::shared_ptr<SideTransfer> side_;  // guarded by mu_
};

// Reads the answer as one message, the way a unary call does (one gRPC
// batch, one wakeup), unless the data plane sends with tags; a payload that
// needs a stream then follows in a second, fetch_held call.
class BlockingRecvTensorCall final : public AbortableCall {
 public:
  // `timeout` bounds the wait for the producer's answer; `peer_timeout`
  // the withdrawal request sent when it passes.
  BlockingRecvTensorCall(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                         RecvTensorRequest request, MemoryLocation destination,
                         absl::Duration timeout, absl::Duration peer_timeout);

  // Runs the call to its end on this thread; `tensor` / `is_dead` are set
  // only on success. When `timeout` passes before the answer, the producer
  // is asked to withdraw the Recv: DEADLINE_EXCEEDED if it did (the value
  // then stays for a later Recv), else the value, which was already taken.
  absl::Status Run(Tensor* tensor, bool* is_dead);

  void Abort(const absl::Status& status) override;

 private:
  struct Fetched;

  // The answer of a single_message request, into decoder_.
  absl::Status ReceiveOneMessage(absl::Time deadline);
  // The answer streamed, into decoder_; starts the side transfer it
  // describes before the stream's status arrives.
  absl::Status ReceiveStream(const RecvTensorRequest& request, grpc::ClientContext* context,
                             absl::Time deadline, const std::shared_ptr<Fetched>& fetched);
  // Starts the data-plane or CUDA IPC copy decoder_'s answer describes;
  // `fetched` is done when it ends, at once when there is none.
  void StartDescribedTransfer(const std::shared_ptr<Fetched>& fetched);
  // Waits for the side transfer and the upload to a GPU, if any.
  absl::Status Complete(Fetched& fetched, Tensor* tensor, bool* is_dead);
  // Waits for `tag` until `deadline`; past it, has the Recv withdrawn
  // (false: the call is aborted) or waits on for the answer already taken.
  bool AwaitAnswer(grpc::CompletionQueue* queue, void* tag, absl::Time deadline);
  // Asks the producer to withdraw this Recv; true when it did (or cannot
  // answer).
  bool Withdrawn();

  const std::shared_ptr<WorkerClient> worker_;
  DataPlane* const data_plane_;
  const RecvTensorRequest request_;
  const absl::Duration timeout_;
  const absl::Duration peer_timeout_;
  const MemoryLocation destination_;
  grpc::ClientContext context_;
  grpc::ClientContext fetch_held_context_;  // of the second call, if any
  std::unique_ptr<TensorDecoder> decoder_;  // of the call in progress
  StreamUpload upload_;
  std::mutex mu_;
  absl::Status abort_status_;            // guarded by mu_
  std::shared_ptr<SideTransfer> side_;  // guarded by mu_
};

// Lets the producer free the buffer a finished get or CUDA IPC copy read
// from.
void ReleaseFetched(const WorkerClient& worker, int64_t step_id, const TensorMeta& meta);

// The status a finished call reports: the abort status if it was aborted,
// UNAVAILABLE naming the worker if the worker could not be reached.
absl::Status RecvTensorStatus(const WorkerClient& worker, const grpc::Status& status,
                              const absl::Status& abort_status);

}  // namespace rdv::control
