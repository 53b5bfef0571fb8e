#include "apps/bench_session.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "apps/cpu_placement.h"
#include "control/data_plane.h"
#include "control/protocol.h"
#include "control/read_ahead.h"
#include "control/security.h"
#include "control/stats_format.h"
#include "control/tensor_pattern.h"
#include "core/device_copy.h"
#include "core/notification.h"

namespace rdv::control {
namespace {

using bench::Percentile;
using bench::Row;

constexpr char kProducerWorker[] = "/job:worker/replica:0/task:0";
constexpr absl::Duration kPeerStartLimit = absl::Seconds(60);

}  // namespace

absl::StatusOr<cpu_set_t> CpusAllowedFor(int cpu, int peer_cpu) {
  RDV_ASSIGN_OR_RETURN(const cpu_set_t allowed, CpusAllowed());
  RDV_RETURN_IF_ERROR(CheckCpu("cpu", cpu, allowed));
  RDV_RETURN_IF_ERROR(CheckCpu("peer_cpu", peer_cpu, allowed));
  return allowed;
}

absl::Status BenchSession::Connect() {
  const std::string protocol = options_.protocol;
  RDV_ASSIGN_OR_RETURN(const cpu_set_t allowed, CpusAllowedFor(options_.cpu, options_.peer_cpu));
  if (options_.local) {
    // The peer inherits the mask of the thread that spawns it.
    RDV_RETURN_IF_ERROR(PinThreadTo(options_.peer_cpu, allowed));
    RDV_ASSIGN_OR_RETURN(peer_process_,
                         WorkerProcess::Start({"--task=0", "--listen=127.0.0.1:0", "--enable_driver",
                                               absl::StrCat("--protocol=", protocol),
                                               "--cluster=worker=127.0.0.1:1,127.0.0.1:1"},
                                              kPeerStartLimit));
    peer_address_ = peer_process_->address();
  } else {
    peer_address_ = options_.client;
  }
  // Before this process' own worker starts its threads, which inherit it.
  RDV_RETURN_IF_ERROR(PinThreadTo(options_.cpu, allowed));
  RDV_ASSIGN_OR_RETURN(WorkerServerOptions options, WorkerServerOptions::FromEnvironment());
  options.task = 1;
  options.protocol = protocol;
  options.listen_address = "127.0.0.1:0";
  RDV_ASSIGN_OR_RETURN(options.cluster,
                       ClusterSpec::FromFlag(absl::StrCat("worker=", peer_address_, ",127.0.0.1:1")));
  read_ahead_bytes_ = options.control.read_ahead_bytes;
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
      options_.cuda_memory ? "/device:GPU:0" : "/device:CPU:0";
  key_ = CreateRendezvousKey(absl::StrCat(kProducerWorker, device), peer_incarnation_,
                             absl::StrCat(consumer_->worker_name(), device), "edge_1_bench");
  return absl::OkStatus();
}

std::string BenchSession::Placement() const {
  if (options_.cpu == -1 && options_.peer_cpu == -1) return "";
  std::string placement = absl::StrCat(", this process on ", CpusOf(0));
  if (peer_process_ != nullptr) {
    absl::StrAppend(&placement, ", the peer on ", CpusOf(peer_process_->pid()));
  }
  return placement;
}

absl::StatusOr<std::string> BenchSession::StatsOfBothEnds() const {
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

std::string BenchSession::NextKey() {
  if (!options_.first_keys) return key_;
  std::string key = absl::StrCat(key_, "_", next_key_++);
  keys_sent_.push_back(key);
  return key;
}

ProduceRequest BenchSession::ProduceRequestFor(int64_t step, int64_t size, int count,
                                               uint32_t seed) {
  ProduceRequest request;
  request.set_step_id(step);
  for (int i = 0; i < count; ++i) {
    ProduceItem* item = request.add_items();
    item->set_rendezvous_key(NextKey());
    item->set_dtype(static_cast<int>(DType::kUInt8));
    if (options_.reshaped_keys && values_produced_++ % 2 == 1) item->add_dims(1);
    item->add_dims(size);
    item->set_seed(seed);
  }
  return request;
}

absl::Status BenchSession::StartProduce(int64_t step, int64_t size, int count, uint32_t seed) {
  RDV_RETURN_IF_ERROR(AwaitProduce());
  ProduceRequest request = ProduceRequestFor(step, size, count, seed);
  producing_ = std::async(std::launch::async, [this, request = std::move(request)] {
    absl::Status status = Produce(request);
    if (!status.ok()) consumer_->rendezvous_mgr().Find(request.step_id())->StartAbort(status);
    return status;
  });
  return absl::OkStatus();
}

absl::Status BenchSession::ProduceNow(int64_t step, int64_t size, int count, uint32_t seed) {
  for (int produced = 0; produced < count; produced += kValuesPerProduce) {
    const int values = std::min(kValuesPerProduce, count - produced);
    RDV_RETURN_IF_ERROR(Produce(ProduceRequestFor(step, size, values, seed)));
  }
  return absl::OkStatus();
}

absl::Status BenchSession::AwaitProduce() {
  if (!producing_.valid()) return absl::OkStatus();
  return producing_.get();
}

absl::Status BenchSession::Produce(const ProduceRequest& request) {
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

absl::Status BenchSession::FetchRaw(int64_t size, std::vector<double>* latencies) {
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

absl::Status BenchSession::Receive(int64_t step, int64_t size, int count,
                            std::vector<double>* latencies, std::vector<Tensor>* received) {
  if (options_.raw_grpc) {
    for (int i = 0; i < count; ++i) RDV_RETURN_IF_ERROR(FetchRaw(size, latencies));
    return absl::OkStatus();
  }
  std::vector<ParsedKey> keys;
  for (int i = 0; i < count; ++i) {
    if (!options_.first_keys) {
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

absl::Status BenchSession::Verify(const std::vector<Tensor>& received, uint32_t seed,
                                  bool whole) {
  if (!options_.verify) return absl::OkStatus();
  constexpr size_t kSampledBlocks = 64;
  for (const Tensor& value : received) {
    Tensor host = value;
    if (!value.location().is_host()) {
      RDV_ASSIGN_OR_RETURN(host, CopyTensor(value, MemoryLocation::Host()));
    }
    RDV_RETURN_IF_ERROR(whole ? VerifyPattern(host, seed)
                              : VerifyPatternSample(host, seed, kSampledBlocks));
  }
  return absl::OkStatus();
}

int BenchSession::QuietWarmupWindows(int64_t size) const {
  constexpr int kQuietWindows = 3;
  // A Recv that reads ahead asks for up to depth + 1 values: their
  // destinations are registered then, and first written (the costly first
  // touch) only as the windows after it take them.
  const size_t ahead = ReadAhead::DepthFor(read_ahead_bytes_, static_cast<size_t>(size)) + 1;
  const auto window = static_cast<size_t>(options_.in_flight);
  return kQuietWindows + static_cast<int>((ahead + window - 1) / window);
}

uint64_t BenchSession::PoolRegistrations() {
  DataPlane* plane = consumer_->data_plane();
  return plane == nullptr ? 0 : plane->allocator()->stats().registrations;
}

absl::StatusOr<Row> BenchSession::Measure(int64_t size) {
  const int64_t step = next_step_++;
  const uint32_t seed = static_cast<uint32_t>(step);
  keys_sent_.clear();  // the last size's extra values went with its step
  const int batch = std::max(kValuesPerProduce, options_.in_flight);
  const double time_s = options_.time_s;
  int iterations = options_.iters;
  if (iterations <= 0) {
    iterations = static_cast<int>(std::clamp<int64_t>((int64_t{256} << 20) / std::max<int64_t>(size, 1), 5, 1000));
  }
  const int window = options_.in_flight;
  const int warmup = options_.warmup;
  // The two windows of first use (RecvTensor, then the transport's wireup)
  // come before the --warmup Recvs that warm the fast path.
  int warmup_rounds = warmup == 0 ? 0 : 2 + (warmup + window - 1) / window;
  // The consumer's pool may still grow after the first Recvs: a Recv's
  // callback holds its tensor until it returns, and the next Recv may
  // allocate before that.
  constexpr int kMaxWarmupRounds = 30;
  const int quiet_rounds = QuietWarmupWindows(size);
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
  // A run of a set count has the peer Send all the values it can take
  // before its first window: a Produce call beside the timed windows (the
  // peer's 1,024 Sends held a CPU for 1 to 4 ms) made the slowest window
  // of a run with 8 Recvs in flight, and so its p99. A timed run cannot
  // know its count: it asks for a batch ahead as it goes.
  if (time_s <= 0 && !options_.raw_grpc) {
    buffered = std::max(warmup_rounds, kMaxWarmupRounds) * window + iterations;
    RDV_RETURN_IF_ERROR(ProduceNow(step, size, buffered, seed));
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(time_s);
  for (int round = 0; round < warmup_rounds ||
                      (time_s > 0 ? absl::Now() < deadline
                                  : static_cast<int>(latencies.size()) < iterations);
       ++round) {
    const bool warm = round >= warmup_rounds;
    const int count = warm && time_s <= 0
                          ? std::min(window, iterations - static_cast<int>(latencies.size()))
                          : window;
    // A batch ahead, so that the Sends have happened before a Recv needs them.
    if (time_s > 0 && buffered < count + batch && !options_.raw_grpc) {
      RDV_RETURN_IF_ERROR(StartProduce(step, size, batch, seed));
      buffered += batch;
    }
    std::vector<double> window_latencies;
    std::vector<Tensor> received;
    const uint64_t registered = PoolRegistrations();
    const absl::Time start = absl::Now();
    RDV_RETURN_IF_ERROR(Receive(step, size, count, &window_latencies, &received));
    const double took = absl::ToDoubleSeconds(absl::Now() - start);
    buffered -= count;
    RDV_RETURN_IF_ERROR(Verify(received, seed, /*whole=*/!warm));
    held = std::move(received);
    if (!warm) {
      if (PoolRegistrations() != registered) last_growth = round;
      if (round + 1 == warmup_rounds && round - last_growth < quiet_rounds &&
          warmup_rounds < kMaxWarmupRounds) {
        ++warmup_rounds;
      }
      continue;
    }
    busy += took;
    best_window = std::max(best_window, static_cast<double>(size) * count / took);
    latencies.insert(latencies.end(), window_latencies.begin(), window_latencies.end());
  }
  RDV_RETURN_IF_ERROR(Verify(held, seed, /*whole=*/true));
  RDV_RETURN_IF_ERROR(AwaitProduce());
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

}  // namespace rdv::control
