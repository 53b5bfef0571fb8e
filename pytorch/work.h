// A point-to-point operation of the rdv process group as torch sees it
// (c10d::Work). It completes exactly once, from whichever thread finishes
// the operation: an rdv thread (a Recv's callback, the release of a sent
// tensor) or the caller's (an operation refused at once).
#pragma once

#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "core/cancellation.h"
#include "core/notification.h"
#include "core/status.h"

namespace rdv::pytorch {

class Work : public c10d::Work {
 public:
  // `what` names the operation in errors ("recv of tag 3 from rank 1");
  // wait() without a timeout waits at most `default_timeout` (the process
  // group's). `source_rank` is the peer of a recv, -1 otherwise.
  Work(int rank, c10d::OpType type, std::vector<at::Tensor> tensors, std::string what,
       std::chrono::milliseconds default_timeout, int source_rank = -1);

  // The first call wins; later ones are ignored. An error becomes the
  // exception wait() throws: "rdv: <what> failed: <status>".
  void Complete(const absl::Status& status);

  // A Recv's cancellation: abort() cancels it, and the Recv fails CANCELLED.
  CancellationManager& cancellation() { return cancellation_; }

  // Throws when the operation failed, or when it has not completed within
  // `timeout` (the process group's timeout for kNoTimeout); it stays pending.
  bool wait(std::chrono::milliseconds timeout) override;
  void abort() override;
  int sourceRank() const override;
  std::vector<at::Tensor> result() override;
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override;

 private:
  const std::vector<at::Tensor> tensors_;
  const std::string what_;
  const std::chrono::milliseconds default_timeout_;
  const int source_rank_;
  CancellationManager cancellation_;
  std::atomic<bool> completing_{false};
  // Notified after c10d's own completion state is set; wait() looks at it
  // first, as every rdv wait does (RDV_WAIT_SPIN_US).
  Notification done_;
  const c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace rdv::pytorch
