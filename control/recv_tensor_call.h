// The two drivers of a consumer's RecvTensor call. Each sends the request
// and feeds the answer to a RecvExchange (control/recv_exchange.h), which
// does the rest. RecvTensorCall runs on gRPC's threads and deletes itself;
// BlockingRecvTensorCall runs on the caller's thread (the blocking Recv),
// one thread handoff shorter.
#pragma once

#include <memory>
#include <mutex>

#include <grpcpp/support/client_callback.h>

#include "absl/functional/any_invocable.h"
#include "control/recv_exchange.h"

namespace rdv::control {

// What a step's rendezvous can do to a call in flight.
class AbortableCall {
 public:
  virtual ~AbortableCall() = default;
  // Ends the call early; the Recv completes with `status` (the first
  // given). Any thread, until the call is untracked.
  virtual void Abort(const absl::Status& status) = 0;
  // The Recv's cancellation manager fired: Abort, unless the call can make
  // sure first that no value the producer already took is lost.
  virtual void Cancel(const absl::Status& status) { Abort(status); }
};

class RecvTensorCall final : public AbortableCall,
                             public grpc::ClientReadReactor<grpc::ByteBuffer> {
 public:
  // Runs once, on a gRPC, transport or CUDA completion thread, after the
  // call ended.
  using Done = RecvExchange::Done;
  // Runs on the same thread right before `done`, to unhook the call from
  // whoever may Abort it; after it returns nobody calls Abort again.
  using Detach = absl::AnyInvocable<void(AbortableCall*) &&>;

  // `data_plane` (null for protocol grpc) must outlive the call.
  // `landing`: the Recv's RendezvousArgs::landing (may be null).
  RecvTensorCall(std::shared_ptr<WorkerClient> worker, DataPlane* data_plane,
                 RecvTensorRequest request, MemoryLocation destination, Detach detach, Done done,
                 std::shared_ptr<Buffer> landing = nullptr);

  // Starts the call; the object owns itself from here.
  void Start();

  // Safe under the caller's locks: nothing here finishes the call.
  void Abort(const absl::Status& status) override;
  // Asks the producer to withdraw the Recv (one round trip, off this
  // thread), then aborts with `status` if it did or cannot answer. A value
  // it had already taken arrives instead: the cancellation came too late,
  // and the value is not lost.
  void Cancel(const absl::Status& status) override;

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  void Complete(absl::Status status, Tensor tensor, bool is_dead);

  // Whether the call still exists, for a withdrawal answered after it
  // ended, and whether it was cancelled: a call that then fails for any
  // reason (the producer refusing a request it was told to withdraw)
  // fails with the cancellation's status.
  struct Liveness {
    explicit Liveness(RecvTensorCall* live) : call(live) {}
    std::mutex mu;
    RecvTensorCall* call;      // guarded by mu; null once the call completed
    absl::Status cancelled;    // guarded by mu
  };

  // First: the count ends after everything below (worker_, context_, the
  // exchange) is gone, so the cache keeps the worker's last reference.
  CountedCall counted_;
  std::shared_ptr<WorkerClient> worker_;
  const RecvTensorRequest request_;
  Detach detach_;
  Done done_;
  const std::shared_ptr<RecvExchange> exchange_;
  const std::shared_ptr<Liveness> liveness_ = std::make_shared<Liveness>(this);
  grpc::ClientContext context_;
  grpc::ByteBuffer request_buffer_;
  grpc::ByteBuffer response_;
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

  // Runs the call to its end on this thread, the tensor at its
  // destination; `tensor` / `is_dead` are set only on success. When
  // `timeout` passes before the answer, the producer is asked to withdraw
  // the Recv: DEADLINE_EXCEEDED if it did (the value then stays for a later
  // Recv), else the value, which was already taken.
  absl::Status Run(Tensor* tensor, bool* is_dead);

  void Abort(const absl::Status& status) override;

 private:
  struct Result;

  // The single_message call; follows with the fetch_held call when the
  // producer holds the value.
  void RunOneMessage(absl::Time deadline);
  // A streamed call for `request`, into the exchange.
  void RunStream(const RecvTensorRequest& request, grpc::ClientContext* context,
                 absl::Time deadline);
  // Waits for `tag` until `deadline`; past it, has the Recv withdrawn
  // (false: the call is aborted) or waits on for the answer already taken.
  bool AwaitAnswer(grpc::CompletionQueue* queue, void* tag, absl::Time deadline);
  // Asks the producer to withdraw this Recv; true when it did (or cannot
  // answer).
  bool Withdrawn();

  const std::shared_ptr<WorkerClient> worker_;
  const RecvTensorRequest request_;
  const absl::Duration timeout_;
  const absl::Duration peer_timeout_;
  const std::shared_ptr<Result> result_;
  const std::shared_ptr<RecvExchange> exchange_;
  grpc::ClientContext context_;
  grpc::ClientContext fetch_held_context_;  // of the second call, if any
};

}  // namespace rdv::control
