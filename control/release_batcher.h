// Tells a producer which of its buffers the consumer is done with, in
// batches: one ReleaseTransfers call in flight per producer, carrying every
// release that queued up meanwhile. Thread-safe; never blocks.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <vector>

#include <grpcpp/channel.h>

#include "absl/time/time.h"
#include "control/worker.grpc.pb.h"

namespace rdv::control {

class ReleaseBatcher {
 public:
  explicit ReleaseBatcher(std::shared_ptr<grpc::Channel> channel)
      : stub_(WorkerService::NewStub(std::move(channel))) {}

  void Release(const ReleasedTransfer& transfer);

  // Waits until no call is in flight and none will start, so that the
  // batcher (and gRPC) can go: up to `timeout`, then it cancels the call and
  // waits for its prompt end. Later Releases are dropped (the producer
  // frees those buffers when it cleans up the step).
  void Drain(absl::Duration timeout);

 private:
  struct Call;
  void SendLocked();  // mu_ held

  const std::unique_ptr<WorkerService::Stub> stub_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::vector<ReleasedTransfer> queued_;  // mu_
  Call* in_flight_ = nullptr;             // mu_
  bool drained_ = false;                  // mu_
};

}  // namespace rdv::control
