// Runs a graph across the workers of a cluster, the client side of
// RegisterGraph / RunGraph / CleanupGraph (rdv-run, tests): partitions the
// graph by worker (send_device_incarnation from each worker's Handshake),
// registers one partition per worker, then per step runs every partition at
// once and cleans the step up on every worker. Not thread-safe: one caller
// drives it. Every call is bounded by a deadline.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "control/cluster.h"
#include "core/tensor.h"
#include "graph/graph.h"

namespace rdv::control {

struct StepResult {
  // OK, or the step's root cause (the first failure among the workers).
  absl::Status status;
  // Each worker's own answer: a failure on one worker fails the step on all.
  std::map<std::string, absl::Status> worker_status;
  std::vector<Tensor> fetched;  // in the order of Register's fetches
  absl::Duration took;
};

class GraphSession {
 public:
  // Handshakes with every worker of `cluster`, as a member when the
  // environment sets up the door (RDV_TLS_*, RDV_CLUSTER_TOKEN*;
  // control/security.h); UNAVAILABLE naming the worker that does not
  // answer within `call_timeout`.
  static absl::StatusOr<std::unique_ptr<GraphSession>> Connect(const ClusterSpec& cluster,
                                                              absl::Duration call_timeout);
  // Deregisters the graph (best effort, bounded).
  ~GraphSession();

  // Partitions and registers `graph`, replacing a graph registered before.
  // Fetches ("node:slot") may name nodes on any worker.
  absl::Status Register(const graph::Graph& graph, const std::vector<std::string>& fetches);

  // The partitions Register made, by worker name.
  const std::map<std::string, graph::GraphDef>& partitions() const { return partitions_; }
  uint64_t incarnation(const std::string& worker) const;

  // Runs step `step_id` on every worker, waiting at most `timeout`, then
  // cleans the step up everywhere.
  StepResult RunStep(int64_t step_id, absl::Duration timeout);

 private:
  class Worker;
  GraphSession() = default;
  void Deregister();

  absl::Duration call_timeout_;
  std::map<std::string, std::unique_ptr<Worker>> workers_;
  std::map<std::string, graph::GraphDef> partitions_;
  std::map<std::string, std::string> handles_;  // worker -> graph handle
  // Per worker, its fetches; and for each of Register's fetches, where its
  // value comes back (worker, index).
  std::map<std::string, std::vector<std::string>> worker_fetches_;
  std::vector<std::pair<std::string, int>> fetch_sources_;
};

}  // namespace rdv::control
