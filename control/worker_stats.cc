#include "control/worker_stats.h"

#include "absl/strings/str_cat.h"
#include "control/data_plane.h"

namespace rdv::control {
namespace {

constexpr std::array<double, WorkerStats::kLatencyBuckets> kLatencyBoundsUs = {
    10,     20,     50,     100,     200,     500,     1000,    2000,    5000,     10000,
    20000,  50000,  100000, 200000,  500000,  1000000, 2000000, 5000000, 10000000};
constexpr std::array<uint64_t, WorkerStats::kSizeClasses - 1> kSizeClassBounds = {
    4 << 10, 64 << 10, 1 << 20, 16 << 20};
constexpr std::array<const char*, WorkerStats::kSizeClasses> kSizeClassNames = {
    "le_4KiB", "le_64KiB", "le_1MiB", "le_16MiB", "gt_16MiB"};

int SizeClassOf(uint64_t bytes) {
  int size_class = 0;
  while (size_class < WorkerStats::kSizeClasses - 1 && bytes > kSizeClassBounds[size_class]) {
    ++size_class;
  }
  return size_class;
}

int LatencyBucketOf(double us) {
  int bucket = 0;
  while (bucket < WorkerStats::kLatencyBuckets && us > kLatencyBoundsUs[bucket]) ++bucket;
  return bucket;
}

void Add(GetStatsResponse* response, std::string name, double value,
         std::initializer_list<std::pair<const char*, std::string>> labels = {}) {
  StatsCounter* counter = response->add_counters();
  counter->set_name(std::move(name));
  counter->set_value(value);
  for (const auto& [label, label_value] : labels) (*counter->mutable_labels())[label] = label_value;
}

uint64_t Load(const std::atomic<uint64_t>& counter) {
  return counter.load(std::memory_order_relaxed);
}

}  // namespace

absl::string_view SentPathName(SentPath path) {
  switch (path) {
    case SentPath::kInline: return "inline";
    case SentPath::kStream: return "stream";
    case SentPath::kTransportGet: return "transport_get";
    case SentPath::kTransportTag: return "transport_tag";
    case SentPath::kFastPath: return "fast_path";
    case SentPath::kGpuDirect: return "gpudirect";
    case SentPath::kStaged: return "staged";
    case SentPath::kCudaIpc: return "cuda_ipc";
    case SentPath::kCount: break;
  }
  return "unknown";
}

void WorkerStats::Sent(SentPath path, uint64_t bytes) {
  const auto index = static_cast<size_t>(path);
  sent_[index].fetch_add(1, std::memory_order_relaxed);
  sent_bytes_[index].fetch_add(bytes, std::memory_order_relaxed);
}

void WorkerStats::RecvStarted() { in_flight_.fetch_add(1, std::memory_order_relaxed); }

void WorkerStats::RecvEnded(const absl::Status& status, uint64_t bytes, absl::Duration elapsed) {
  in_flight_.fetch_sub(1, std::memory_order_relaxed);
  if (!status.ok()) {
    errors_[static_cast<size_t>(status.code()) % errors_.size()].fetch_add(
        1, std::memory_order_relaxed);
    return;
  }
  received_.fetch_add(1, std::memory_order_relaxed);
  received_bytes_.fetch_add(bytes, std::memory_order_relaxed);
  const double us = absl::ToDoubleMicroseconds(elapsed);
  const int size_class = SizeClassOf(bytes);
  latency_[size_class][LatencyBucketOf(us)].fetch_add(1, std::memory_order_relaxed);
  latency_sum_us_[size_class].fetch_add(static_cast<uint64_t>(us), std::memory_order_relaxed);
}

void WorkerStats::AppendTo(const DataPlane* data_plane, GetStatsResponse* response) const {
  for (size_t path = 0; path < sent_.size(); ++path) {
    const std::string name(SentPathName(static_cast<SentPath>(path)));
    Add(response, "rdv_sent_transfers_total", Load(sent_[path]), {{"path", name}});
    Add(response, "rdv_sent_bytes_total", Load(sent_bytes_[path]), {{"path", name}});
  }
  Add(response, "rdv_received_transfers_total", Load(received_));
  Add(response, "rdv_received_bytes_total", Load(received_bytes_));
  Add(response, "rdv_recvs_in_flight",
      static_cast<double>(in_flight_.load(std::memory_order_relaxed)));
  for (size_t code = 1; code < errors_.size(); ++code) {
    if (const uint64_t count = Load(errors_[code]); count > 0) {
      Add(response, "rdv_recv_errors_total", count,
          {{"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(code))}});
    }
  }
  for (int size_class = 0; size_class < kSizeClasses; ++size_class) {
    const std::string label = kSizeClassNames[size_class];
    uint64_t cumulative = 0;
    for (int bucket = 0; bucket <= kLatencyBuckets; ++bucket) {
      cumulative += Load(latency_[size_class][bucket]);
      const std::string le =
          bucket < kLatencyBuckets ? absl::StrCat(kLatencyBoundsUs[bucket] / 1e6) : "+Inf";
      Add(response, "rdv_recv_latency_seconds_bucket", cumulative,
          {{"size_class", label}, {"le", le}});
    }
    Add(response, "rdv_recv_latency_seconds_count", cumulative, {{"size_class", label}});
    Add(response, "rdv_recv_latency_seconds_sum", Load(latency_sum_us_[size_class]) / 1e6,
        {{"size_class", label}});
  }
  if (data_plane == nullptr) return;
  const plugin::RegistrationCacheStats cache = data_plane->registration_stats();
  Add(response, "rdv_registration_pool_hits_total", cache.pool_hits);
  Add(response, "rdv_registration_cache_hits_total", cache.hits);
  Add(response, "rdv_registration_cache_misses_total", cache.misses);
  Add(response, "rdv_registration_cache_bytes_registered_total", cache.bytes_registered);
  Add(response, "rdv_fast_path_destinations_registered_total", data_plane->put_exposures());
  Add(response, "rdv_fast_path_bytes_registered_total", data_plane->put_bytes_exposed());
  const plugin::TransportAllocatorStats pool = data_plane->allocator()->stats();
  Add(response, "rdv_pool_allocations_total", pool.allocations);
  Add(response, "rdv_pool_reused_total", pool.reused);
  Add(response, "rdv_pool_bytes_registered", pool.bytes_registered);
  Add(response, "rdv_pool_bytes_cached", pool.bytes_cached);
}

}  // namespace rdv::control
