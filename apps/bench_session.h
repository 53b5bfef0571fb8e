// One rdv-bench measurement session: the peer that Sends (spawned with
// --local, or a --server elsewhere), this process' consumer worker, and the
// timed Recvs of each size. Blocking; one thread drives it.
#pragma once

#include <sched.h>

#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "apps/bench_results.h"
#include "control/worker_process.h"
#include "control/worker_server.h"
#include "core/status.h"
#include "core/tensor.h"
#include "rdv/control/worker.grpc.pb.h"

namespace rdv::control {

// What rdv-bench's flags ask for (apps/rdv_bench.cc has their meaning).
struct BenchOptions {
  std::string protocol = "grpc+ucx";
  bool local = false;   // spawn the peer; else measure against `client`
  std::string client;   // HOST:PORT of an rdv-bench --server
  bool raw_grpc = false;     // unary FetchBytes calls instead of Recvs
  bool first_keys = false;   // every Recv of a key never received before
  bool reshaped_keys = false;  // one key, its values' shapes alternating
  bool cuda_memory = false;  // tensors on GPU 0 of each process
  int iters = 0;        // Recvs per size; 0: enough for 256 MiB, 5 to 1000
  double time_s = 0;    // seconds per size instead of a count
  int warmup = 3;
  int in_flight = 1;
  int cpu = -1;         // this process' CPU, -1 unpinned
  int peer_cpu = -1;    // the --local peer's CPU
  bool verify = true;
};

// The CPUs this process may run on, with `cpu` and `peer_cpu` (-1: none)
// among them; INVALID_ARGUMENT naming the flag otherwise.
absl::StatusOr<cpu_set_t> CpusAllowedFor(int cpu, int peer_cpu);

class BenchSession {
 public:
  explicit BenchSession(BenchOptions options) : options_(std::move(options)) {}

  // Starts a --local peer (or finds the --client one) and this process'
  // consumer worker, pinned as the options say.
  absl::Status Connect();
  // Receives enough tensors of `size` bytes for one row.
  absl::StatusOr<bench::Row> Measure(int64_t size);
  // Both ends' GetStats counters, as tables (--stats).
  absl::StatusOr<std::string> StatsOfBothEnds() const;
  // Where this process and a --local peer run, when either is pinned.
  std::string Placement() const;

 private:
  // Values the peer Sends per Produce call. The call (a gRPC round trip,
  // and a thread) is no part of what a Recv costs: at 32 values per call,
  // made while Recvs were timed, it took a third of the time of a 64 KiB
  // Recv over shared memory. They all Send the one cached pattern tensor.
  static constexpr int kValuesPerProduce = 1024;

  // Has the peer Send `count` tensors of `size` bytes in `step`, on a thread
  // of its own: the timed loop never pauses for it, for a pause would let
  // transfers a read-ahead has in flight go on untimed. A Send that fails
  // aborts the step, so that no Recv waits for it.
  absl::Status StartProduce(int64_t step, int64_t size, int count, uint32_t seed);
  // The last StartProduce's outcome, once it has ended.
  absl::Status AwaitProduce();
  // Has the peer Send `count` tensors, as above, before it returns.
  absl::Status ProduceNow(int64_t step, int64_t size, int count, uint32_t seed);
  ProduceRequest ProduceRequestFor(int64_t step, int64_t size, int count, uint32_t seed);
  absl::Status Produce(const ProduceRequest& request);
  // Receives `count` tensors at once (one window of --in_flight) into
  // `received`; appends each transfer's seconds to `latencies`.
  absl::Status Receive(int64_t step, int64_t size, int count, std::vector<double>* latencies,
                       std::vector<Tensor>* received);
  // One unary FetchBytes call (--subject grpc-raw).
  absl::Status FetchRaw(int64_t size, std::vector<double>* latencies);
  // Checks every byte (`whole`) or a few blocks of each tensor, unless
  // verify is off. The timed loop checks a few: checking every byte there
  // is a pause, as above.
  absl::Status Verify(const std::vector<Tensor>& received, uint32_t seed, bool whole);
  // Blocks the consumer's pool has registered so far (0 without a data plane).
  uint64_t PoolRegistrations();
  // Windows of warm-up with no new block in the pool before timing starts:
  // 3, and as many as the values of `size` read ahead fill.
  int QuietWarmupWindows(int64_t size) const;
  // The key the next Produce item carries.
  std::string NextKey();

  const BenchOptions options_;
  std::unique_ptr<WorkerProcess> peer_process_;
  std::unique_ptr<WorkerServer> consumer_;
  std::unique_ptr<DriverService::Stub> driver_;
  std::unique_ptr<WorkerService::Stub> worker_;
  std::unique_ptr<WorkerService::Stub> consumer_stub_;  // this process' own worker (--stats)
  std::string peer_address_;
  uint64_t peer_incarnation_ = 0;
  int64_t next_step_ = 1;
  size_t read_ahead_bytes_ = 0;  // the consumer's RDV_READ_AHEAD_BYTES
  // The key of every Recv (--keys recurring), or the stem of each Recv's
  // own key (--keys first).
  std::string key_;
  int64_t next_key_ = 0;
  std::deque<std::string> keys_sent_;  // --keys first: produced, not received yet, in order
  int64_t values_produced_ = 0;        // --keys reshaped: which shape the next value takes
  std::future<absl::Status> producing_;  // the last StartProduce
};

}  // namespace rdv::control
