// rdv-run: runs a dataflow graph across the workers of a cluster. It
// partitions the graph by worker, registers one partition on each, runs
// --steps steps (every partition of a step at once, the _Send/_Recv pairs
// meeting in the step's rendezvous over the workers' protocol), prints the
// fetched tensors and each step's time, and cleans up each step.
//
//   rdv-run --local_workers 2 --protocol grpc+ucx --graph examples/matmul_chain.json
//           --fetch out:0,y:0 --steps 3
//   rdv-run --cluster worker=h1:2222,h2:2222 --graph g.json --fetch out:0
//
// Exit status: 0 when every step ran, 1 when a step failed (its root cause
// is printed) or the set-up did, 2 for bad flags.
#include <cstdio>
#include <iostream>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "apps/tool_flags.h"
#include "control/graph_session.h"
#include "control/worker_process.h"
#include "graph/kernels.h"

ABSL_FLAG(std::string, cluster, "", "cluster as job=host:port,host:port (workers already running)");
ABSL_FLAG(std::string, cluster_file, "", "cluster as a JSON file: {\"worker\": [\"host:port\"]}");
ABSL_FLAG(int, local_workers, 0, "start this many rdv-workers on 127.0.0.1 instead of --cluster");
ABSL_FLAG(std::string, protocol, "grpc",
          "with --local_workers: the workers' protocol (grpc, grpc+ucx, grpc+verbs)");
ABSL_FLAG(std::string, graph, "", "the graph as JSON (see examples/)");
ABSL_FLAG(std::string, fetch, "", "outputs to print, node:slot[,node:slot...]");
ABSL_FLAG(int, steps, 1, "steps to run");
ABSL_FLAG(int64_t, first_step, 1, "the first step's id");
ABSL_FLAG(double, step_timeout_s, 60, "a step that takes longer fails DEADLINE_EXCEEDED");

namespace rdv::control {
namespace {

constexpr absl::Duration kCallTimeout = absl::Seconds(10);

absl::StatusOr<ClusterSpec> Cluster(std::vector<std::unique_ptr<WorkerProcess>>* local) {
  const int local_workers = absl::GetFlag(FLAGS_local_workers);
  const bool given = !absl::GetFlag(FLAGS_cluster).empty() ||
                     !absl::GetFlag(FLAGS_cluster_file).empty();
  if ((local_workers > 0) == given) {
    return absl::InvalidArgumentError(
        "give exactly one of --local_workers N, --cluster or --cluster_file");
  }
  if (!absl::GetFlag(FLAGS_cluster_file).empty()) {
    return ClusterSpec::FromJsonFile(absl::GetFlag(FLAGS_cluster_file));
  }
  if (given) return ClusterSpec::FromFlag(absl::GetFlag(FLAGS_cluster));
  std::string spec;
  RDV_ASSIGN_OR_RETURN(
      *local, StartLocalCluster(local_workers,
                                {absl::StrCat("--protocol=", absl::GetFlag(FLAGS_protocol))},
                                absl::Seconds(30), &spec));
  return ClusterSpec::FromFlag(spec);
}

absl::Status Run(bool* step_failed) {
  if (absl::GetFlag(FLAGS_graph).empty()) return absl::InvalidArgumentError("--graph is required");
  RDV_ASSIGN_OR_RETURN(graph::Graph graph, graph::Graph::FromJsonFile(absl::GetFlag(FLAGS_graph)));
  const std::vector<std::string> fetches =
      absl::StrSplit(absl::GetFlag(FLAGS_fetch), ',', absl::SkipEmpty());
  std::vector<std::unique_ptr<WorkerProcess>> local;
  RDV_ASSIGN_OR_RETURN(const ClusterSpec cluster, Cluster(&local));
  RDV_ASSIGN_OR_RETURN(auto session, GraphSession::Connect(cluster, kCallTimeout));
  RDV_RETURN_IF_ERROR(session->Register(graph, fetches));
  std::printf("rdv-run: %s, %d nodes in %zu partitions, %s\n", absl::GetFlag(FLAGS_graph).c_str(),
              graph.num_nodes(), session->partitions().size(),
              local.empty() ? "on the given cluster"
                            : absl::StrCat(local.size(), " local workers, protocol ",
                                           absl::GetFlag(FLAGS_protocol))
                                  .c_str());
  const absl::Duration timeout = absl::Seconds(absl::GetFlag(FLAGS_step_timeout_s));
  for (int i = 0; i < absl::GetFlag(FLAGS_steps); ++i) {
    const int64_t step = absl::GetFlag(FLAGS_first_step) + i;
    StepResult result = session->RunStep(step, timeout);
    if (!result.status.ok()) {
      std::printf("step %lld failed after %.3f ms: %s\n", static_cast<long long>(step),
                  absl::ToDoubleMilliseconds(result.took), result.status.ToString().c_str());
      *step_failed = true;
      continue;
    }
    std::printf("step %lld: %.3f ms\n", static_cast<long long>(step),
                absl::ToDoubleMilliseconds(result.took));
    for (size_t f = 0; f < fetches.size(); ++f) {
      std::printf("  %s = %s\n", fetches[f].c_str(), graph::TensorSummary(result.fetched[f]).c_str());
    }
  }
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  rdv::ParseToolFlags(argc, argv,
      "rdv-run (--local_workers N [--protocol P] | --cluster job=h:p,...) --graph g.json "
      "--fetch node:slot[,...] [--steps N]");
  bool step_failed = false;
  const absl::Status status = rdv::control::Run(&step_failed);
  if (!status.ok()) {
    std::cerr << "rdv-run: " << status << "\n";
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return step_failed ? 1 : 0;
}
