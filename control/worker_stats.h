// What a worker moved (docs/stats.md): the values it sent, by the path they
// took, and the Recvs it made of other workers' values, with their bytes,
// errors and latency by size class. Counting is relaxed atomic increments
// on the paths it describes, nothing more. Thread-safe; owned by
// WorkerServer, read by GetStats, rdv-stat and the metrics file.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "rdv/control/worker.pb.h"
#include "core/status.h"

namespace rdv::control {

class DataPlane;

// How a value left this worker (the label `path` of rdv_sent_*).
enum class SentPath {
  kInline,         // in the RecvTensor answer's one message
  kStream,         // in chunks of the RecvTensor stream (protocol grpc, or a large string)
  kTransportGet,   // offered through the data plane; the consumer read it
  kTransportTag,   // sent tagged through the data plane
  kFastPath,       // asked for and sent through the data plane, no RecvTensor
  kGpuDirect,      // GPU memory offered through the data plane
  kStaged,         // GPU memory copied through pinned host memory first
  kCudaIpc,        // GPU memory lent by CUDA IPC to a consumer on this host
  kCount,
};

absl::string_view SentPathName(SentPath path);

class WorkerStats {
 public:
  // Recv latency buckets: upper bounds 10 us, 20 us, 50 us ... 10 s.
  static constexpr int kLatencyBuckets = 19;
  // Recv size classes: up to 4 KiB, 64 KiB, 1 MiB, 16 MiB, more.
  static constexpr int kSizeClasses = 5;

  // A value left for a consumer.
  void Sent(SentPath path, uint64_t bytes);
  // A Recv of another worker's value started / ended (`bytes` received).
  void RecvStarted();
  void RecvEnded(const absl::Status& status, uint64_t bytes, absl::Duration elapsed);

  // Every counter, and those of `data_plane` (null for protocol grpc):
  // registration cache and pool.
  void AppendTo(const DataPlane* data_plane, GetStatsResponse* response) const;

 private:
  template <size_t N>
  using Counters = std::array<std::atomic<uint64_t>, N>;

  Counters<static_cast<size_t>(SentPath::kCount)> sent_;
  Counters<static_cast<size_t>(SentPath::kCount)> sent_bytes_;
  std::atomic<uint64_t> received_{0};
  std::atomic<uint64_t> received_bytes_{0};
  std::atomic<int64_t> in_flight_{0};
  Counters<17> errors_;  // by absl::StatusCode
  std::array<Counters<kLatencyBuckets + 1>, kSizeClasses> latency_;  // last: above all bounds
  std::array<std::atomic<uint64_t>, kSizeClasses> latency_sum_us_{};
};

}  // namespace rdv::control
