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
#include "control/side_transfer.h"
#include "control/tensor_codec.h"
#include "control/worker_cache.h"
#include "core/chunked_copy.h"
#include "core/memory.h"

namespace rdv::control {

struct FetchJoin;

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
