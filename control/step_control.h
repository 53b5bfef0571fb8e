// A worker's step control: aborting a step here and on every other worker
// of the cluster, and cleaning a step up. The tensor service and the graph
// service use it; neither knows about the other.
//
// Thread-safe. AbortStep and FailStep return at once: forwards to the
// other workers go out on gRPC's threads, each bounded by the peer
// timeout; WaitForForwards waits for them (at shutdown).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <vector>

#include "absl/status/status.h"
#include "control/rendezvous_mgr.h"
#include "rdv/control/worker.pb.h"
#include "control/worker_env.h"

namespace rdv::control {

class StepControl {
 public:
  // Frees what a part of the worker keeps for a step; runs on the thread
  // that cleans the step up.
  using StepCleaner = std::function<void(int64_t step_id)>;

  // `env` and `rendezvous_mgr` outlive this.
  StepControl(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr);

  // Called before the server serves: `cleaner` runs at every CleanupStep.
  void AddCleaner(StepCleaner cleaner);

  // Aborts the step's rendezvous here with the request's status (ABORTED
  // when it carries none) and, if it asks to propagate, on every other
  // worker of the cluster.
  void AbortStep(const AbortStepRequest& request);
  // The root cause of a failed step: aborts it here and everywhere else.
  void FailStep(int64_t step_id, const absl::Status& cause);
  // Cleans the step's rendezvous up and runs every cleaner.
  void CleanupStep(int64_t step_id);
  // Waits until every forwarded abort was answered or timed out.
  void WaitForForwards();

 private:
  void Forward(const AbortStepRequest& request);

  const WorkerEnv& env_;
  RendezvousMgr& rendezvous_mgr_;
  std::vector<StepCleaner> cleaners_;  // set before serving; read-only then

  std::mutex mu_;
  std::condition_variable forwards_done_;
  int forwards_in_flight_ = 0;  // mu_
};

}  // namespace rdv::control
