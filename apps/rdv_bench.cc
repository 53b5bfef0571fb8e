// rdv-bench: Send -> Recv bandwidth and latency between two worker
// processes, over any protocol rdv speaks, in the manner of perftest.
//
//   rdv-bench --local --protocol grpc+ucx --sizes 4K:64M      # spawns its peer
//   rdv-bench --server --listen 0.0.0.0:18515 --protocol grpc+verbs
//   rdv-bench --client host:18515 --protocol grpc+verbs --json out.json
//
// The peer (the producer) Sends tensors filled with a known pattern; this
// process Recvs them, times each Recv, and checks every byte afterwards
// (outside the timed region) unless --no_verify. A mismatch is an error,
// never a figure. Results go to stdout as a table, and to --json / --csv /
// --plot (a PNG drawn by gnuplot) when asked.
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <deque>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "apps/bench_results.h"
#include "apps/compare_script.h"
#include "apps/cpu_placement.h"
#include "apps/tool_flags.h"
#include "control/data_plane.h"
#include "control/protocol.h"
#include "control/security.h"
#include "control/stats_format.h"
#include "control/tensor_pattern.h"
#include "control/worker_cache.h"
#include "control/worker_process.h"
#include "control/worker_server.h"
#include "core/cuda.h"
#include "core/device_copy.h"
#include "core/notification.h"

ABSL_FLAG(bool, local, false, "spawn the peer worker on 127.0.0.1 and measure against it");
ABSL_FLAG(bool, server, false, "be the peer: serve Sends until SIGINT/SIGTERM");
ABSL_FLAG(std::string, client, "", "measure against the --server at HOST:PORT");
ABSL_FLAG(std::string, listen, "0.0.0.0:18515", "with --server: host:port to listen on");
ABSL_FLAG(std::string, protocol, "grpc+ucx", "grpc, grpc+ucx or grpc+verbs");
ABSL_FLAG(std::string, subject, "rdv",
          "rdv (Send -> Recv over --protocol), or grpc-raw: the reference, a bytes payload in a "
          "unary gRPC call with the same channel settings");
ABSL_FLAG(std::string, sizes, "4K:64M",
          "tensor sizes in bytes: a doubling range LOW:HIGH, or a list A,B,C (K, M, G suffixes)");
ABSL_FLAG(int, iters, 0, "Recvs per size (0: enough for 256 MiB, 5 to 1000)");
ABSL_FLAG(double, time_s, 0, "seconds per size instead of a count (0: use --iters)");
ABSL_FLAG(int, warmup, 3,
          "untimed Recvs per size first, in whole windows of --in_flight and, unless 0, at "
          "least two windows: a recurring key's first window takes RecvTensor (the key is not "
          "known yet) and its second pays for the fast path's first use (the transport's "
          "endpoint wireup, milliseconds). Unless 0, warm-up goes on until the consumer's "
          "pool has registered nothing new for 3 windows (at most 30): a fresh destination's "
          "first touch costs up to 200 ms per 64 MiB on a virtual machine");
ABSL_FLAG(int, in_flight, 1, "Recvs in flight at once");
ABSL_FLAG(std::string, memory, "host",
          "where tensors live on both sides: host, or cuda (GPU 0 of each process; between "
          "processes of one host they cross by CUDA IPC unless RDV_CUDA_IPC=0)");
ABSL_FLAG(std::string, direction, "pull", "pull (the consumer reads); push is not built yet");
ABSL_FLAG(std::string, keys, "recurring",
          "recurring: every Recv of a size takes the next value of one key (a training loop's "
          "steady state: the fast path serves it); first: every Recv is of a key never "
          "received before (RecvTensor, the first exchange of each key)");
ABSL_FLAG(int, cpu, -1,
          "run this process on this CPU only (-1: where the scheduler puts it). Benchmarks "
          "of two processes on a small machine pin each to its own CPU, as ucx_perftest -c "
          "does: left to the scheduler, where their threads land sets small-message latency");
ABSL_FLAG(int, peer_cpu, -1, "with --local: run the peer on this CPU only (-1: unpinned)");
ABSL_FLAG(bool, no_verify, false, "skip checking the received bytes");
ABSL_FLAG(bool, stats, false,
          "after the run, print the counters of both ends (as rdv-stat does): which path "
          "carried the bytes, what was registered (docs/stats.md)");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");
ABSL_FLAG(std::string, csv, "", "write the results as CSV to this file");
ABSL_FLAG(std::string, plot, "", "draw bandwidth against size to this PNG (needs gnuplot)");

namespace rdv::control {
namespace {

using bench::ParseSizes;
using bench::Percentile;
using bench::PrintRow;
using bench::Row;
using bench::TransportEnv;

constexpr char kProducerWorker[] = "/job:worker/replica:0/task:0";
constexpr absl::Duration kPeerStartLimit = absl::Seconds(60);

// The CPUs this process may run on, with --cpu and --peer_cpu among them.
absl::StatusOr<cpu_set_t> CpusAllowedWithFlags() {
  RDV_ASSIGN_OR_RETURN(const cpu_set_t allowed, CpusAllowed());
  RDV_RETURN_IF_ERROR(CheckCpu("cpu", absl::GetFlag(FLAGS_cpu), allowed));
  RDV_RETURN_IF_ERROR(CheckCpu("peer_cpu", absl::GetFlag(FLAGS_peer_cpu), allowed));
  return allowed;
}

class Bench {
 public:
  absl::Status Connect();
  absl::StatusOr<Row> Measure(int64_t size);
  // Both ends' GetStats counters, as tables (--stats).
  absl::StatusOr<std::string> StatsOfBothEnds() const;
  // Where this process and a --local peer run, when either is pinned.
  std::string Placement() const;

 private:
  absl::Status Produce(int64_t step, int64_t size, int count, uint32_t seed);
  // Receives `count` tensors at once (one window of --in_flight) into
  // `received`; appends each transfer's seconds to `latencies`.
  absl::Status Receive(int64_t step, int64_t size, int count, std::vector<double>* latencies,
                       std::vector<Tensor>* received);
  // One unary FetchBytes call (--subject grpc-raw).
  absl::Status FetchRaw(int64_t size, std::vector<double>* latencies);
  // Checks every byte, unless --no_verify.
  static absl::Status Verify(const std::vector<Tensor>& received, uint32_t seed);
  // Blocks the consumer's pool has registered so far (0 without a data plane).
  uint64_t PoolRegistrations();

  std::unique_ptr<WorkerProcess> peer_process_;
  std::unique_ptr<WorkerServer> consumer_;
  std::unique_ptr<DriverService::Stub> driver_;
  std::unique_ptr<WorkerService::Stub> worker_;
  std::unique_ptr<WorkerService::Stub> consumer_stub_;  // this process' own worker (--stats)
  std::string peer_address_;
  uint64_t peer_incarnation_ = 0;
  int64_t next_step_ = 1;
  // The key of every Recv (--keys recurring), or the stem of each Recv's
  // own key (--keys first).
  std::string key_;
  const bool raw_ = absl::GetFlag(FLAGS_subject) == "grpc-raw";
  const bool first_keys_ = absl::GetFlag(FLAGS_keys) == "first";
  int64_t next_key_ = 0;
  std::deque<std::string> keys_sent_;  // --keys first: produced, not received yet, in order
  // The key the next Produce item carries.
  std::string NextKey();
};

absl::Status Bench::Connect() {
  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  RDV_ASSIGN_OR_RETURN(const cpu_set_t allowed, CpusAllowedWithFlags());
  if (absl::GetFlag(FLAGS_local)) {
    // The peer inherits the mask of the thread that spawns it.
    RDV_RETURN_IF_ERROR(PinThreadTo(absl::GetFlag(FLAGS_peer_cpu), allowed));
    RDV_ASSIGN_OR_RETURN(peer_process_,
                         WorkerProcess::Start({"--task=0", "--listen=127.0.0.1:0", "--enable_driver",
                                               absl::StrCat("--protocol=", protocol),
                                               "--cluster=worker=127.0.0.1:1,127.0.0.1:1"},
                                              kPeerStartLimit));
    peer_address_ = peer_process_->address();
  } else {
    peer_address_ = absl::GetFlag(FLAGS_client);
  }
  // Before this process' own worker starts its threads, which inherit it.
  RDV_RETURN_IF_ERROR(PinThreadTo(absl::GetFlag(FLAGS_cpu), allowed));
  RDV_ASSIGN_OR_RETURN(WorkerServerOptions options, WorkerServerOptions::FromEnvironment());
  options.task = 1;
  options.protocol = protocol;
  options.listen_address = "127.0.0.1:0";
  RDV_ASSIGN_OR_RETURN(options.cluster,
                       ClusterSpec::FromFlag(absl::StrCat("worker=", peer_address_, ",127.0.0.1:1")));
  RDV_ASSIGN_OR_RETURN(consumer_, WorkerServer::Start(options));
  grpc::ChannelArguments channel_args = PeerChannelArguments(options.control);
  channel_args.SetMaxReceiveMessageSize(-1);  // raw gRPC's reference replies hold a whole size
  auto channel = CreateMemberChannel(peer_address_, options.control.security, channel_args);
  driver_ = DriverService::NewStub(channel);
  worker_ = WorkerService::NewStub(channel);
  consumer_stub_ = WorkerService::NewStub(
      CreateMemberChannel(consumer_->address(), options.control.security, channel_args));
  // The keys name the peer's incarnation: ask it.
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + options.control.peer_timeout));
  HandshakeRequest request;
  request.set_worker_name(consumer_->worker_name());
  request.set_incarnation(consumer_->incarnation());
  request.set_protocol_version(kProtocolVersion);
  HandshakeResponse response;
  if (const grpc::Status status = worker_->Handshake(&context, request, &response); !status.ok()) {
    return absl::UnavailableError(absl::StrCat("no rdv-bench server at ", peer_address_, ": ",
                                               status.error_message()));
  }
  peer_incarnation_ = response.incarnation();
  const std::string device =
      absl::GetFlag(FLAGS_memory) == "cuda" ? "/device:GPU:0" : "/device:CPU:0";
  key_ = CreateRendezvousKey(absl::StrCat(kProducerWorker, device), peer_incarnation_,
                             absl::StrCat(consumer_->worker_name(), device), "edge_1_bench");
  return absl::OkStatus();
}

std::string Bench::Placement() const {
  if (absl::GetFlag(FLAGS_cpu) == -1 && absl::GetFlag(FLAGS_peer_cpu) == -1) return "";
  std::string placement = absl::StrCat(", this process on ", CpusOf(0));
  if (peer_process_ != nullptr) {
    absl::StrAppend(&placement, ", the peer on ", CpusOf(peer_process_->pid()));
  }
  return placement;
}

absl::StatusOr<std::string> Bench::StatsOfBothEnds() const {
  std::string tables;
  for (WorkerService::Stub* stub : {worker_.get(), consumer_stub_.get()}) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    GetStatsResponse stats;
    if (const grpc::Status status = stub->GetStats(&context, GetStatsRequest(), &stats);
        !status.ok()) {
      return absl::UnavailableError(absl::StrCat("GetStats: ", status.error_message()));
    }
    absl::StrAppend(&tables, StatsAsTable(stats));
  }
  return tables;
}

std::string Bench::NextKey() {
  if (!first_keys_) return key_;
  std::string key = absl::StrCat(key_, "_", next_key_++);
  keys_sent_.push_back(key);
  return key;
}

absl::Status Bench::Produce(int64_t step, int64_t size, int count, uint32_t seed) {
  ProduceRequest request;
  request.set_step_id(step);
  for (int i = 0; i < count; ++i) {
    ProduceItem* item = request.add_items();
    item->set_rendezvous_key(NextKey());
    item->set_dtype(static_cast<int>(DType::kUInt8));
    item->add_dims(size);
    item->set_seed(seed);
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(1)));
  ProduceResponse response;
  const grpc::Status status = driver_->Produce(&context, request, &response);
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("the peer refused to Send (is it an rdv-bench "
                                               "--server or a worker with --enable_driver?): ",
                                               status.error_message()));
  }
  return absl::OkStatus();
}

absl::Status Bench::FetchRaw(int64_t size, std::vector<double>* latencies) {
  FetchBytesRequest request;
  request.set_size(static_cast<uint64_t>(size));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(5)));
  FetchBytesResponse response;
  const absl::Time start = absl::Now();
  const grpc::Status status = driver_->FetchBytes(&context, request, &response);
  latencies->push_back(absl::ToDoubleSeconds(absl::Now() - start));
  if (!status.ok()) return absl::UnavailableError(absl::StrCat("FetchBytes: ", status.error_message()));
  if (response.payload().size() != static_cast<size_t>(size)) {
    return absl::DataLossError(absl::StrCat("FetchBytes answered ", response.payload().size(),
                                            " bytes, expected ", size));
  }
  return absl::OkStatus();
}

absl::Status Bench::Receive(int64_t step, int64_t size, int count,
                            std::vector<double>* latencies, std::vector<Tensor>* received) {
  if (raw_) {
    for (int i = 0; i < count; ++i) RDV_RETURN_IF_ERROR(FetchRaw(size, latencies));
    return absl::OkStatus();
  }
  std::vector<ParsedKey> keys;
  for (int i = 0; i < count; ++i) {
    if (!first_keys_) {
      keys.push_back(*ParsedKey::Parse(key_));
      continue;
    }
    keys.push_back(*ParsedKey::Parse(keys_sent_.front()));
    keys_sent_.pop_front();
  }
  auto rendezvous = consumer_->rendezvous_mgr().Find(step);
  std::vector<Tensor> values(count);
  std::vector<absl::Status> statuses(count);
  std::vector<absl::Time> ends(count);
  std::vector<Notification> finished(count);
  const absl::Time start = absl::Now();
  for (int i = 0; i < count; ++i) {
    rendezvous->RecvAsync(keys[i], {}, [&, i](const absl::Status& status, const RendezvousArgs&,
                                          const RendezvousArgs&, const Tensor& value, bool) {
      ends[i] = absl::Now();
      statuses[i] = status;
      values[i] = value;
      finished[i].Notify();
    });
  }
  for (int i = 0; i < count; ++i) {
    if (!finished[i].WaitForNotificationWithTimeout(absl::Minutes(5))) {
      // Ends the Recvs still waiting (their callbacks run now), so that
      // none of them writes here after this returns.
      rendezvous->StartAbort(absl::DeadlineExceededError("a Recv took over 5 minutes"));
      for (Notification& done : finished) done.WaitForNotification();
      return absl::DeadlineExceededError("a Recv took over 5 minutes");
    }
  }
  for (int i = 0; i < count; ++i) {
    RDV_RETURN_IF_ERROR(statuses[i]);
    if (values[i].TotalBytes() != static_cast<size_t>(size)) {
      return absl::DataLossError(absl::StrCat("received ", values[i].TotalBytes(),
                                              " bytes, expected ", size));
    }
    latencies->push_back(absl::ToDoubleSeconds(ends[i] - start));
    received->push_back(std::move(values[i]));
  }
  return absl::OkStatus();
}

absl::Status Bench::Verify(const std::vector<Tensor>& received, uint32_t seed) {
  if (absl::GetFlag(FLAGS_no_verify)) return absl::OkStatus();
  for (const Tensor& value : received) {
    if (!value.location().is_host()) {
      RDV_ASSIGN_OR_RETURN(const Tensor host, CopyTensor(value, MemoryLocation::Host()));
      RDV_RETURN_IF_ERROR(VerifyPattern(host, seed));
    } else {
      RDV_RETURN_IF_ERROR(VerifyPattern(value, seed));
    }
  }
  return absl::OkStatus();
}

uint64_t Bench::PoolRegistrations() {
  DataPlane* plane = consumer_->data_plane();
  return plane == nullptr ? 0 : plane->allocator()->stats().registrations;
}

absl::StatusOr<Row> Bench::Measure(int64_t size) {
  const int64_t step = next_step_++;
  const uint32_t seed = static_cast<uint32_t>(step);
  keys_sent_.clear();  // the last size's extra values went with its step
  const int batch = std::max(32, absl::GetFlag(FLAGS_in_flight));
  const double time_s = absl::GetFlag(FLAGS_time_s);
  int iterations = absl::GetFlag(FLAGS_iters);
  if (iterations <= 0) {
    iterations = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(size, 1), 5, 1000));
  }
  const int window = absl::GetFlag(FLAGS_in_flight);
  const int warmup = absl::GetFlag(FLAGS_warmup);
  int warmup_rounds = warmup == 0 ? 0 : std::max(2, (warmup + window - 1) / window);
  // The consumer's pool may still grow after the first Recvs: a Recv's
  // callback holds its tensor until it returns, and the next Recv may
  // allocate before that.
  constexpr int kQuietWarmupRounds = 3;
  constexpr int kMaxWarmupRounds = 30;
  int last_growth = -1;
  // Each window's tensors stay held until the next window has arrived, as
  // a training step uses its input while the next one comes: the pool then
  // holds two blocks per Recv in flight from the second window on, where
  // dropping them at once left it to a race when the second one came.
  std::vector<Tensor> held;
  std::vector<double> latencies;
  double busy = 0;
  double best_window = 0;  // bytes per second of the fastest window
  int buffered = 0;  // Sent by the peer, not received yet
  const absl::Time deadline = absl::Now() + absl::Seconds(time_s);
  for (int round = 0; round < warmup_rounds ||
                      (time_s > 0 ? absl::Now() < deadline
                                  : static_cast<int>(latencies.size()) < iterations);
       ++round) {
    const bool warm = round >= warmup_rounds;
    const int count = warm && time_s <= 0
                          ? std::min(window, iterations - static_cast<int>(latencies.size()))
                          : window;
    if (buffered < count && !raw_) {
      RDV_RETURN_IF_ERROR(Produce(step, size, batch, seed));
      buffered += batch;
    }
    std::vector<double> window_latencies;
    std::vector<Tensor> received;
    const uint64_t registered = PoolRegistrations();
    const absl::Time start = absl::Now();
    RDV_RETURN_IF_ERROR(Receive(step, size, count, &window_latencies, &received));
    const double took = absl::ToDoubleSeconds(absl::Now() - start);
    buffered -= count;
    RDV_RETURN_IF_ERROR(Verify(received, seed));
    held = std::move(received);
    if (!warm) {
      if (PoolRegistrations() != registered) last_growth = round;
      if (round + 1 == warmup_rounds && round - last_growth < kQuietWarmupRounds &&
          warmup_rounds < kMaxWarmupRounds) {
        ++warmup_rounds;
      }
      continue;
    }
    busy += took;
    best_window = std::max(best_window, static_cast<double>(size) * count / took);
    latencies.insert(latencies.end(), window_latencies.begin(), window_latencies.end());
  }
  consumer_->rendezvous_mgr().Cleanup(step);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  CleanupStepRequest cleanup;
  cleanup.set_step_id(step);
  CleanupStepResponse cleaned;
  (void)worker_->CleanupStep(&context, cleanup, &cleaned);

  Row row;
  row.size_bytes = size;
  row.iterations = static_cast<int>(latencies.size());
  const double bytes = static_cast<double>(size);
  row.bw_GBps_avg = bytes * row.iterations / busy / 1e9;
  row.bw_GBps_peak = best_window / 1e9;
  row.lat_us_p50 = Percentile(latencies, 0.5) * 1e6;
  row.lat_us_p99 = Percentile(latencies, 0.99) * 1e6;
  return row;
}

absl::Status ServeUntilSignal() {
  RDV_ASSIGN_OR_RETURN(WorkerServerOptions options, WorkerServerOptions::FromEnvironment());
  options.task = 0;
  options.enable_driver = true;
  options.protocol = absl::GetFlag(FLAGS_protocol);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  RDV_ASSIGN_OR_RETURN(options.cluster,
                       ClusterSpec::FromFlag(absl::StrCat("worker=", options.listen_address)));
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  RDV_ASSIGN_OR_RETURN(const cpu_set_t allowed, CpusAllowedWithFlags());
  RDV_RETURN_IF_ERROR(PinThreadTo(absl::GetFlag(FLAGS_cpu), allowed));
  RDV_ASSIGN_OR_RETURN(std::unique_ptr<WorkerServer> server, WorkerServer::Start(options));
  std::printf("rdv-bench server %s on %s; stop with Ctrl-C\n", options.protocol.c_str(),
              server->address().c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  return absl::OkStatus();
}

absl::Status CheckFlags() {
  const int modes = absl::GetFlag(FLAGS_local) + absl::GetFlag(FLAGS_server) +
                    !absl::GetFlag(FLAGS_client).empty();
  if (modes != 1) return absl::InvalidArgumentError("give exactly one of --local, --server, --client");
  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  if (protocol != "grpc" && protocol != "grpc+ucx" && protocol != "grpc+verbs") {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol '", protocol, "': use grpc, grpc+ucx or grpc+verbs"));
  }
  const std::string subject = absl::GetFlag(FLAGS_subject);
  if (subject != "rdv" && subject != "grpc-raw") {
    return absl::InvalidArgumentError(absl::StrCat("--subject '", subject, "': use rdv or grpc-raw"));
  }
  if (subject == "grpc-raw" && absl::GetFlag(FLAGS_in_flight) != 1) {
    return absl::InvalidArgumentError("--subject grpc-raw makes one call at a time (--in_flight 1)");
  }
  if (absl::GetFlag(FLAGS_direction) != "pull") {
    return absl::UnimplementedError("--direction push is not built yet: rdv pulls (the consumer reads)");
  }
  if (absl::GetFlag(FLAGS_memory) != "host" && absl::GetFlag(FLAGS_memory) != "cuda") {
    return absl::InvalidArgumentError("--memory: use host or cuda");
  }
  if (absl::GetFlag(FLAGS_memory) == "cuda" && cuda::DeviceCount() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--memory cuda: ", cuda::UnavailableReason()));
  }
  if (absl::GetFlag(FLAGS_keys) != "recurring" && absl::GetFlag(FLAGS_keys) != "first") {
    return absl::InvalidArgumentError("--keys: use recurring or first");
  }
  if (absl::GetFlag(FLAGS_peer_cpu) != -1 && !absl::GetFlag(FLAGS_local)) {
    return absl::InvalidArgumentError("--peer_cpu pins the peer that --local spawns; pin a "
                                      "--server with its own --cpu");
  }
  if (absl::GetFlag(FLAGS_in_flight) < 1 || absl::GetFlag(FLAGS_warmup) < 0) {
    return absl::InvalidArgumentError("--in_flight must be >= 1 and --warmup >= 0");
  }
  return absl::OkStatus();
}

absl::Status Run() {
  RDV_RETURN_IF_ERROR(CheckFlags());
  if (absl::GetFlag(FLAGS_server)) return ServeUntilSignal();
  RDV_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, ParseSizes(absl::GetFlag(FLAGS_sizes)));
  Bench bench;
  RDV_RETURN_IF_ERROR(bench.Connect());
  const std::string env = TransportEnv(absl::GetFlag(FLAGS_protocol));
  std::printf("rdv-bench: %s %s%s%s, %s memory, %s keys, %d in flight, %s%s\n",
              absl::GetFlag(FLAGS_subject) == "grpc-raw" ? "raw unary gRPC calls on the channel of"
                                                           : "protocol",
              absl::GetFlag(FLAGS_protocol).c_str(), env.empty() ? "" : ", ", env.c_str(),
              absl::GetFlag(FLAGS_memory).c_str(), absl::GetFlag(FLAGS_keys).c_str(),
              absl::GetFlag(FLAGS_in_flight),
              absl::GetFlag(FLAGS_no_verify) ? "not verified" : "every byte verified",
              bench.Placement().c_str());
  std::printf(" %-12s %-12s %-16s %-18s %-14s %-14s\n", "#bytes", "#iterations", "BW peak[GB/s]",
              "BW average[GB/s]", "lat p50[us]", "lat p99[us]");
  std::vector<Row> rows;
  for (const int64_t size : sizes) {
    if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r  measuring %lld bytes...", static_cast<long long>(size));
    RDV_ASSIGN_OR_RETURN(Row row, bench.Measure(size));
    if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%30s\r", "");
    PrintRow(row);
    rows.push_back(row);
  }
  if (absl::GetFlag(FLAGS_stats)) {
    RDV_ASSIGN_OR_RETURN(const std::string tables, bench.StatsOfBothEnds());
    std::printf("\ncounters of both ends (docs/stats.md):\n%s", tables.c_str());
  }
  return bench::WriteResults(
      rows, {.subject = absl::GetFlag(FLAGS_subject) == "grpc-raw"
                            ? "grpc-raw"
                            : absl::StrCat("rdv:", absl::GetFlag(FLAGS_protocol)),
             .protocol = absl::GetFlag(FLAGS_protocol),
             .keys = absl::GetFlag(FLAGS_keys),
             .verified = !absl::GetFlag(FLAGS_no_verify) && absl::GetFlag(FLAGS_subject) != "grpc-raw",
             .json = absl::GetFlag(FLAGS_json),
             .csv = absl::GetFlag(FLAGS_csv),
             .plot = absl::GetFlag(FLAGS_plot)});
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "compare") return rdv::RunCompareScript(argc, argv);
  rdv::ParseToolFlags(argc, argv,
      "Send->Recv bandwidth and latency between two rdv workers.\n"
      "  rdv-bench --local [--protocol grpc+ucx] [--sizes 4K:64M]\n"
      "  rdv-bench --server [--listen 0.0.0.0:18515] [--protocol ...]\n"
      "  rdv-bench --client HOST:PORT [--protocol ...] [--json F] [--csv F] [--plot F.png]\n"
      "  rdv-bench compare [--help]   every protocol beside ucx_perftest and raw gRPC");
  // Standard output carries the table; UCX, loaded later with the transport
  // plugin, would print its warnings there.
  setenv("UCX_LOG_FILE", "stderr", /*overwrite=*/0);
  const absl::Status status = rdv::control::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "rdv-bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
