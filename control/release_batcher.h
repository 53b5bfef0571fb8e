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

class ReleaseBatcher : public std::enable_shared_from_this<ReleaseBatcher> {
 public:
  explicit ReleaseBatcher(std::shared_ptr<grpc::Channel> channel)
      : stub_(WorkerService::NewStub(std::move(channel))) {}

  void Release(const ReleasedTransfer& transfer);

  // Waits (up to `timeout`) until no call is in flight, so that gRPC is not
  // torn down under one at exit.
  void Drain(absl::Duration timeout);

 private:
  void SendLocked();  // mu_ held

  const std::unique_ptr<WorkerService::Stub> stub_;
  std::mutex mu_;
  std::condition_variable idle_;
  std::vector<ReleasedTransfer> queued_;  // mu_
  bool in_flight_ = false;               // mu_
};

}  // namespace rdv::control
