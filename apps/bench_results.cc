#include "apps/bench_results.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace rdv::bench {

namespace {

absl::StatusOr<int64_t> ParseSize(absl::string_view text) {
  int64_t scale = 1;
  if (!text.empty()) {
    switch (text.back()) {
      case 'K': case 'k': scale = int64_t{1} << 10; break;
      case 'M': case 'm': scale = int64_t{1} << 20; break;
      case 'G': case 'g': scale = int64_t{1} << 30; break;
      default: break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) {
    return absl::InvalidArgumentError(absl::StrCat("--sizes: '", text, "' is not a size"));
  }
  return value * scale;
}

}  // namespace

absl::StatusOr<std::vector<int64_t>> ParseSizes(absl::string_view text) {
  std::vector<int64_t> sizes;
  if (std::vector<absl::string_view> range = absl::StrSplit(text, ':'); range.size() == 2) {
    RDV_ASSIGN_OR_RETURN(int64_t low, ParseSize(range[0]));
    RDV_ASSIGN_OR_RETURN(const int64_t high, ParseSize(range[1]));
    if (low <= 0 || high < low) {
      return absl::InvalidArgumentError("--sizes LOW:HIGH needs 0 < LOW <= HIGH");
    }
    for (; low <= high; low *= 2) sizes.push_back(low);
    return sizes;
  }
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    RDV_ASSIGN_OR_RETURN(const int64_t size, ParseSize(item));
    sizes.push_back(size);
  }
  return sizes;
}

std::string TransportEnv(const std::string& protocol) {
  const char* name = protocol == "grpc+ucx" ? "UCX_TLS" : protocol == "grpc+verbs" ? "RDV_IB_DEVICE" : nullptr;
  const char* value = name ? std::getenv(name) : nullptr;
  return value ? absl::StrCat(name, "=", value) : "";
}

double Percentile(std::vector<double> values, double fraction) {
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(fraction * values.size()));
  return values[index];
}

void PrintRow(const Row& row) {
  std::printf(" %-12lld %-12d %-16.3f %-18.3f %-14.1f %-14.1f\n",
              static_cast<long long>(row.size_bytes), row.iterations, row.bw_GBps_peak,
              row.bw_GBps_avg, row.lat_us_p50, row.lat_us_p99);
  std::fflush(stdout);
}

absl::Status WriteResults(const std::vector<Row>& rows, const ResultFiles& files) {
  const std::string& subject = files.subject;
  const std::string env = TransportEnv(files.protocol);
  if (const std::string& path = files.json; !path.empty()) {
    std::ofstream out(path);
    out << "[\n";
    for (size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << absl::StrFormat(
          "  {\"subject\": \"%s\", \"transport_env\": \"%s\", \"keys\": \"%s\", "
          "\"size_bytes\": %d, \"iterations\": %d, \"bw_GBps_avg\": %.6f, \"bw_GBps_peak\": %.6f, "
          "\"lat_us_p50\": %.3f, \"lat_us_p99\": %.3f, \"verified\": %s}%s\n",
          subject, env, files.keys, r.size_bytes, r.iterations, r.bw_GBps_avg, r.bw_GBps_peak,
          r.lat_us_p50, r.lat_us_p99, files.verified ? "true" : "false",
          i + 1 < rows.size() ? "," : "");
    }
    out << "]\n";
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write --json ", path));
  }
  const std::string& csv = files.csv;
  const std::string& plot = files.plot;
  const std::string data = !csv.empty() ? csv : plot.empty() ? "" : plot + ".csv";
  if (!data.empty()) {
    std::ofstream out(data);
    out << "subject,transport_env,keys,size_bytes,iterations,bw_GBps_avg,bw_GBps_peak,"
           "lat_us_p50,lat_us_p99\n";
    for (const Row& r : rows) {
      out << absl::StrFormat("%s,%s,%s,%d,%d,%.6f,%.6f,%.3f,%.3f\n", subject, env, files.keys,
                             r.size_bytes, r.iterations, r.bw_GBps_avg, r.bw_GBps_peak,
                             r.lat_us_p50, r.lat_us_p99);
    }
    if (!out) return absl::UnavailableError(absl::StrCat("cannot write ", data));
  }
  if (!plot.empty()) {
    const std::string script = absl::StrFormat(
        "set terminal pngcairo size 900,600; set output '%s'; set datafile separator ','; "
        "set logscale xy; set xlabel 'tensor bytes'; set ylabel 'GB/s'; set key left top; "
        "set title 'rdv-bench %s'; plot '%s' skip 1 using 4:6 with linespoints title '%s'",
        plot, subject, data, subject);
    const std::string command = absl::StrCat("gnuplot -e \"", script, "\"");
    if (std::system(command.c_str()) != 0) {
      return absl::UnavailableError("--plot: gnuplot failed (is gnuplot installed? scripts/setup "
                                    "installs it)");
    }
  }
  return absl::OkStatus();
}

}  // namespace rdv::bench
