// A worker's graph service: RegisterGraph keeps a partition (a GraphDef
// placed on this worker), RunGraph runs it on a step's rendezvous,
// CleanupGraph forgets it. The only part of control/ that needs graph/.
//
// Thread-safe. A run holds its executor until it ends, so CleanupGraph
// during a run is safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <grpcpp/support/server_callback.h>

#include "absl/status/statusor.h"
#include "control/rendezvous_mgr.h"
#include "control/step_control.h"
#include "rdv/control/worker.pb.h"
#include "control/worker_env.h"
#include "graph/executor.h"

namespace rdv::control {

class GraphService {
 public:
  // Everything passed outlives this.
  GraphService(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr, StepControl& steps);

  // The handle of the registered partition; INVALID_ARGUMENT for a graph
  // that does not parse, or has a node placed on another worker.
  absl::StatusOr<std::string> RegisterGraph(const RegisterGraphRequest& request);
  // Runs the partition for the step and finishes the call when it has (on
  // the thread that finishes it). A failure aborts the step on every
  // worker; a call the client cancels aborts the step here.
  grpc::ServerUnaryReactor* RunGraph(const RunGraphRequest& request, RunGraphResponse* response);
  absl::Status CleanupGraph(const std::string& handle);

 private:
  class RunGraphReactor;

  std::shared_ptr<const graph::Executor> Find(const std::string& handle);

  const WorkerEnv& env_;
  RendezvousMgr& rendezvous_mgr_;
  StepControl& steps_;

  std::mutex mu_;
  std::map<std::string, std::shared_ptr<const graph::Executor>> graphs_;  // mu_
  int64_t graphs_registered_ = 0;                                         // mu_
};

}  // namespace rdv::control
