// A GetStats answer (control/worker_stats.h) as people and tools read it:
// a table (rdv-stat), JSON (rdv-stat --json) and Prometheus' text
// exposition format (rdv-worker --metrics_file, rdv-stat --prometheus).
#pragma once

#include <string>

#include "rdv/control/worker.pb.h"

namespace rdv::control {

// One line per counter that is not zero (histogram buckets left out: their
// count and sum stay), under a header naming the worker.
std::string StatsAsTable(const GetStatsResponse& stats);
std::string StatsAsJson(const GetStatsResponse& stats);
// Every counter, with its worker as labels `worker` and `protocol`.
std::string StatsAsPrometheus(const GetStatsResponse& stats);

}  // namespace rdv::control
