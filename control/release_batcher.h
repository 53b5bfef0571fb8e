// Tells a producer which of its buffers the consumer is done with, in
// batches. A release waits up to kCarryWindow for the next RecvTensor to the
// same producer, which carries it (TakeQueued); else a ReleaseTransfers call
// takes every release queued by then, one call in flight per producer.
// Thread-safe; never blocks. The wait and the calls end on gRPC's threads.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include <grpcpp/alarm.h>
#include <grpcpp/channel.h>

#include "absl/time/time.h"
#include "rdv/control/worker.grpc.pb.h"

namespace rdv::control {

// Long enough for a Recv that follows another to carry its release, short
// enough that a producer's buffer is not held past the burst of Recvs.
inline constexpr absl::Duration kCarryWindow = absl::Milliseconds(100);

class ReleaseBatcher {
 public:
  explicit ReleaseBatcher(std::shared_ptr<grpc::Channel> channel)
      : stub_(WorkerService::NewStub(std::move(channel))) {}
  // Drains at once if nobody did: the alarm and the call end first.
  ~ReleaseBatcher() { Drain(absl::ZeroDuration()); }

  void Release(const ReleasedTransfer& transfer);
  // Moves the queued releases into `carrier`, a RecvTensorRequest's
  // `released`, which the producer handles when the request arrives.
  void TakeQueued(google::protobuf::RepeatedPtrField<ReleasedTransfer>* carrier);

  // Waits until no call is in flight and none will start, so that the
  // batcher (and gRPC) can go: up to `timeout`, then it cancels the call and
  // waits for its prompt end. Later Releases are dropped (the producer
  // frees those buffers when it cleans up the step).
  void Drain(absl::Duration timeout);
  // No call in flight or scheduled (nothing queued).
  bool Idle() {
    std::lock_guard lock(mu_);
    return IdleLocked();
  }

 private:
  struct Call;
  void ScheduleCallLocked();  // mu_ held
  void SendLocked();          // mu_ held
  bool IdleLocked() const { return in_flight_ == nullptr && !call_scheduled_; }

  const std::unique_ptr<WorkerService::Stub> stub_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::vector<ReleasedTransfer> queued_;  // mu_
  Call* in_flight_ = nullptr;             // mu_
  std::unique_ptr<grpc::Alarm> alarm_;    // mu_; ends kCarryWindow
  bool call_scheduled_ = false;           // mu_: alarm_ is set
  bool drained_ = false;                  // mu_
};

}  // namespace rdv::control
