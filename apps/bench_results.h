// rdv-bench's results: the sizes it is asked for, one row per size, and
// the table, JSON, CSV and plot it writes them as.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "core/status.h"

namespace rdv::bench {

struct Row {
  int64_t size_bytes = 0;
  int iterations = 0;
  double bw_GBps_avg = 0;
  double bw_GBps_peak = 0;
  double lat_us_p50 = 0;
  double lat_us_p99 = 0;
};

// "4K:64M" (powers of two from 4 KiB to 64 MiB) or "64,1K,1M".
absl::StatusOr<std::vector<int64_t>> ParseSizes(absl::string_view text);

// The value below which `fraction` of `values` lie.
double Percentile(std::vector<double> values, double fraction);

// The environment that chose the transport's path ("UCX_TLS=tcp"), or "".
std::string TransportEnv(const std::string& protocol);

// One table line on stdout.
void PrintRow(const Row& row);

// Where the rows go besides the table; an empty path writes nothing.
struct ResultFiles {
  std::string subject;   // "rdv:<protocol>" or "grpc-raw"
  std::string protocol;
  std::string keys;      // "recurring", "first" or "reshaped" (rdv-bench --keys)
  bool verified = true;  // checked: apps/rdv_bench.cc says how much
  std::string json;
  std::string csv;
  std::string plot;      // a PNG drawn by gnuplot, its data beside it as .csv
};
absl::Status WriteResults(const std::vector<Row>& rows, const ResultFiles& files);

}  // namespace rdv::bench
