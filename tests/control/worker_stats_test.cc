#include "control/worker_stats.h"

#include <set>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "control/stats_format.h"
#include "gtest/gtest.h"

namespace rdv::control {
namespace {

double ValueOf(const GetStatsResponse& stats, absl::string_view name,
               const std::map<std::string, std::string>& labels = {}) {
  for (const StatsCounter& counter : stats.counters()) {
    if (counter.name() != name) continue;
    bool match = true;
    for (const auto& [label, value] : labels) {
      auto it = counter.labels().find(label);
      match = match && it != counter.labels().end() && it->second == value;
    }
    if (match) return counter.value();
  }
  return -1;
}

GetStatsResponse Snapshot(const WorkerStats& stats) {
  GetStatsResponse response;
  response.set_worker_name("/job:worker/replica:0/task:3");
  response.set_protocol("grpc+ucx");
  stats.AppendTo(nullptr, &response);
  return response;
}

TEST(WorkerStatsTest, CountsSentValuesByPath) {
  WorkerStats stats;
  stats.Sent(SentPath::kTransportTag, 1000);
  stats.Sent(SentPath::kTransportTag, 24);
  stats.Sent(SentPath::kInline, 8);
  const GetStatsResponse snapshot = Snapshot(stats);
  EXPECT_EQ(ValueOf(snapshot, "rdv_sent_transfers_total", {{"path", "transport_tag"}}), 2);
  EXPECT_EQ(ValueOf(snapshot, "rdv_sent_bytes_total", {{"path", "transport_tag"}}), 1024);
  EXPECT_EQ(ValueOf(snapshot, "rdv_sent_transfers_total", {{"path", "inline"}}), 1);
  EXPECT_EQ(ValueOf(snapshot, "rdv_sent_transfers_total", {{"path", "cuda_ipc"}}), 0);
}

TEST(WorkerStatsTest, RecvsLandInTheirSizeClassAndLatencyBucket) {
  WorkerStats stats;
  stats.RecvStarted();
  stats.RecvStarted();
  stats.RecvStarted();
  stats.RecvEnded(absl::OkStatus(), 100, absl::Microseconds(15));
  stats.RecvEnded(absl::OkStatus(), 2 << 20, absl::Milliseconds(3));
  stats.RecvEnded(absl::UnavailableError("gone"), 0, absl::Seconds(1));
  const GetStatsResponse snapshot = Snapshot(stats);
  EXPECT_EQ(ValueOf(snapshot, "rdv_received_transfers_total"), 2);
  EXPECT_EQ(ValueOf(snapshot, "rdv_received_bytes_total"), 100 + (2 << 20));
  EXPECT_EQ(ValueOf(snapshot, "rdv_recvs_in_flight"), 0);
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_errors_total", {{"code", "UNAVAILABLE"}}), 1);
  // Cumulative buckets: 15 us is above 10 us and within 20 us.
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_latency_seconds_bucket",
                    {{"size_class", "le_4KiB"}, {"le", "1e-05"}}),
            0);
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_latency_seconds_bucket",
                    {{"size_class", "le_4KiB"}, {"le", "2e-05"}}),
            1);
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_latency_seconds_bucket",
                    {{"size_class", "le_4KiB"}, {"le", "+Inf"}}),
            1);
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_latency_seconds_count", {{"size_class", "le_16MiB"}}), 1);
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_latency_seconds_bucket",
                    {{"size_class", "le_16MiB"}, {"le", "0.002"}}),
            0);
  EXPECT_EQ(ValueOf(snapshot, "rdv_recv_latency_seconds_bucket",
                    {{"size_class", "le_16MiB"}, {"le", "0.005"}}),
            1);
}

TEST(StatsFormatTest, PrometheusTextHasOneTypeLinePerFamilyAndTheWorkersLabels) {
  WorkerStats stats;
  stats.Sent(SentPath::kStream, 5 << 20);
  stats.RecvStarted();
  stats.RecvEnded(absl::OkStatus(), 64, absl::Microseconds(40));
  const std::string text = StatsAsPrometheus(Snapshot(stats));
  std::set<std::string> typed;
  std::string family;
  for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      ASSERT_EQ(parts.size(), 4u) << line;
      EXPECT_TRUE(typed.insert(parts[2]).second) << "a second TYPE line for " << parts[2];
      family = parts[2];
      continue;
    }
    EXPECT_TRUE(absl::StartsWith(line, family)) << line << " outside its family " << family;
    EXPECT_TRUE(absl::StrContains(line, "worker=\"/job:worker/replica:0/task:3\"")) << line;
  }
  EXPECT_TRUE(absl::StrContains(text, "# TYPE rdv_sent_bytes_total counter"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE rdv_recv_latency_seconds histogram"));
  EXPECT_TRUE(absl::StrContains(text, "# TYPE rdv_recvs_in_flight gauge"));
  EXPECT_TRUE(absl::StrContains(
      text, "rdv_sent_bytes_total{path=\"stream\",protocol=\"grpc+ucx\","
            "worker=\"/job:worker/replica:0/task:3\"} 5242880\n"));
}

TEST(StatsFormatTest, TheTableShowsWhatIsNotZeroAndJsonEverything) {
  WorkerStats stats;
  stats.Sent(SentPath::kFastPath, 64);
  const GetStatsResponse snapshot = Snapshot(stats);
  const std::string table = StatsAsTable(snapshot);
  EXPECT_TRUE(absl::StartsWith(table, "/job:worker/replica:0/task:3 (")) << table;
  EXPECT_TRUE(absl::StrContains(table, "rdv_sent_bytes_total{path=\"fast_path\"}")) << table;
  EXPECT_FALSE(absl::StrContains(table, "path=\"inline\"")) << table;
  const std::string json = StatsAsJson(snapshot);
  EXPECT_TRUE(absl::StrContains(json, "\"workerName\": \"/job:worker/replica:0/task:3\"")) << json;
  EXPECT_TRUE(absl::StrContains(json, "\"path\": \"inline\"")) << json;
}

}  // namespace
}  // namespace rdv::control
