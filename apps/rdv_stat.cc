// rdv-stat HOST:PORT: what a worker moved since it started (its GetStats
// counters, docs/stats.md), as a table, --json or --prometheus. It calls as
// a member of the worker's cluster: the door's settings come from the same
// variables as a worker's (RDV_TLS_CERT, RDV_TLS_KEY, RDV_TLS_CA,
// RDV_CLUSTER_TOKEN_FILE; docs/security.md).
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "apps/tool_flags.h"
#include "control/grpc_status.h"
#include "control/options.h"
#include "control/security.h"
#include "control/stats_format.h"
#include "rdv/control/worker.grpc.pb.h"
#include "control/worker_cache.h"

ABSL_FLAG(bool, json, false, "print the counters as JSON (GetStatsResponse's fields)");
ABSL_FLAG(bool, prometheus, false, "print the counters in Prometheus' text format");
ABSL_FLAG(int, timeout_s, 10, "seconds to wait for the worker's answer");

namespace rdv::control {
namespace {

absl::StatusOr<GetStatsResponse> Fetch(const std::string& address) {
  RDV_ASSIGN_OR_RETURN(ControlOptions options, ControlOptions::FromEnvironment());
  auto channel = CreateMemberChannel(address, options.security, PeerChannelArguments(options));
  auto stub = WorkerService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(
      absl::ToChronoTime(absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_timeout_s))));
  GetStatsResponse response;
  const grpc::Status status = stub->GetStats(&context, GetStatsRequest(), &response);
  if (!status.ok()) {
    return absl::Status(FromGrpcStatus(status).code(),
                        absl::StrCat("no rdv worker answered GetStats at ", address, ": ",
                                     status.error_message()));
  }
  return response;
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  const std::vector<char*> args = rdv::ParseToolFlags(
      argc, argv, "rdv-stat HOST:PORT [--json | --prometheus]: what an rdv worker moved");
  if (args.size() != 2) {
    std::fprintf(stderr, "rdv-stat: give one worker address, HOST:PORT (see --help)\n");
    return 1;
  }
  const absl::StatusOr<rdv::control::GetStatsResponse> stats = rdv::control::Fetch(args[1]);
  if (!stats.ok()) {
    std::fprintf(stderr, "rdv-stat: %s\n", stats.status().ToString().c_str());
    return 1;
  }
  using rdv::control::StatsAsJson, rdv::control::StatsAsPrometheus, rdv::control::StatsAsTable;
  const std::string text = absl::GetFlag(FLAGS_json)         ? StatsAsJson(*stats)
                           : absl::GetFlag(FLAGS_prometheus) ? StatsAsPrometheus(*stats)
                                                             : StatsAsTable(*stats);
  std::fputs(text.c_str(), stdout);
  return 0;
}
