// Cross-process transfer benchmarks. The binary runs the consumer workers
// itself (one per protocol) and spawns the producer (a real rdv-worker with
// its driver on, serving grpc+ucx and grpc) on 127.0.0.1.
// BM_GrpcRecv/<bytes> and BM_GrpcUcxRecv/<bytes>: one remote Recv of a
// tensor already sent on the producer, protocol grpc or grpc+ucx (UCX_TLS
// from the environment). BM_RawGrpcUnary/<bytes>: the reference, a unary
// call whose reply carries the same bytes, on a channel with the same
// settings. Pre-sending is outside the timed region. BM_PssOfOneGiB: what
// moving 1 GiB over grpc+ucx adds to the two processes' proportional set
// size together (run it alone, in a fresh process).
#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "bench/death_trials.h"
#include "benchmark/benchmark.h"
#include "control/security.h"
#include "control/worker_cache.h"
#include "control/worker_process.h"
#include "control/worker_server.h"

namespace rdv::control {
namespace {

constexpr char kProducerCpu[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kConsumerCpu[] = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr int kBatch = 32;

struct Peers {
  std::unique_ptr<WorkerServer> consumer;      // protocol grpc, task 1
  std::unique_ptr<WorkerServer> ucx_consumer;  // protocol grpc+ucx, task 2
  std::unique_ptr<WorkerProcess> producer;
  std::unique_ptr<DriverService::Stub> driver;
  std::unique_ptr<WorkerService::Stub> worker;
  std::atomic<int64_t> next_step{1};
};
Peers* peers = nullptr;

absl::Status StartPeers() {
  peers = new Peers;
  RDV_ASSIGN_OR_RETURN(WorkerServerOptions options, WorkerServerOptions::FromEnvironment());
  options.task = 1;
  RDV_ASSIGN_OR_RETURN(options.cluster,
                       ClusterSpec::FromFlag("worker=127.0.0.1:1,127.0.0.1:1,127.0.0.1:1"));
  RDV_ASSIGN_OR_RETURN(peers->consumer, WorkerServer::Start(options));
  options.task = 2;
  options.protocol = "grpc+ucx";
  RDV_ASSIGN_OR_RETURN(peers->ucx_consumer, WorkerServer::Start(options));
  RDV_ASSIGN_OR_RETURN(peers->producer,
                       WorkerProcess::Start({"--task=0", "--listen=127.0.0.1:0", "--enable_driver",
                                             "--protocol=grpc+ucx",
                                             "--cluster=worker=127.0.0.1:1,127.0.0.1:1,127.0.0.1:1"},
                                            absl::Seconds(30)));
  for (WorkerServer* consumer : {peers->consumer.get(), peers->ucx_consumer.get()}) {
    consumer->worker_cache().SetAddress("worker", 0, peers->producer->address());
  }
  // The reference uses exactly the channel settings rdv uses to its peers.
  auto channel = CreateMemberChannel(peers->producer->address(), options.control.security,
                                     PeerChannelArguments(options.control));
  peers->driver = DriverService::NewStub(channel);
  peers->worker = WorkerService::NewStub(channel);
  return absl::OkStatus();
}

void StopPeers() {
  peers->producer.reset();
  peers->ucx_consumer.reset();
  peers->consumer.reset();
  delete peers;
}

bool Produce(int64_t step, const std::string& key, int64_t bytes, int count) {
  ProduceRequest request;
  request.set_step_id(step);
  for (int i = 0; i < count; ++i) {
    ProduceItem* item = request.add_items();
    item->set_rendezvous_key(key);
    item->set_dtype(static_cast<int>(DType::kUInt8));
    item->add_dims(bytes);
  }
  grpc::ClientContext context;
  ProduceResponse response;
  return peers->driver->Produce(&context, request, &response).ok();
}

void Cleanup(WorkerServer* consumer, int64_t step) {
  consumer->rendezvous_mgr().Cleanup(step);
  grpc::ClientContext context;
  CleanupStepRequest request;
  request.set_step_id(step);
  CleanupStepResponse response;
  (void)peers->worker->CleanupStep(&context, request, &response);
}

std::string KeyFor(const WorkerServer& consumer) {
  return CreateRendezvousKey(kProducerCpu, peers->producer->incarnation(),
                             absl::StrCat(consumer.worker_name(), "/device:CPU:0"), "edge_1_bench");
}

void RecvLoop(benchmark::State& state, WorkerServer* consumer) {
  const int64_t bytes = state.range(0);
  const int64_t step = peers->next_step++;
  const std::string key_text = KeyFor(*consumer);
  const ParsedKey key = *ParsedKey::Parse(key_text);
  auto rendezvous = consumer->rendezvous_mgr().Find(step);
  int buffered = 0;
  for (auto _ : state) {
    if (buffered == 0) {
      state.PauseTiming();
      if (!Produce(step, key_text, bytes, kBatch)) state.SkipWithError("Produce failed");
      buffered = kBatch;
      state.ResumeTiming();
    }
    Tensor value;
    bool is_dead;
    const absl::Status status = rendezvous->Recv(key, {}, &value, &is_dead);
    if (!status.ok() || value.TotalBytes() != static_cast<size_t>(bytes)) {
      state.SkipWithError(status.ok() ? "wrong size" : std::string(status.message()).c_str());
      break;
    }
    --buffered;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  Cleanup(consumer, step);
}

void BM_GrpcRecv(benchmark::State& state) { RecvLoop(state, peers->consumer.get()); }
void BM_GrpcUcxRecv(benchmark::State& state) { RecvLoop(state, peers->ucx_consumer.get()); }

// The two processes' proportional set size together, in KiB: a page both
// map (a shared-memory segment) counts once, half in each.
int64_t PssOfBothKib() {
  return bench::MeasureFootprint(peers->producer->pid()).pss_kib + bench::MeasureFootprint().pss_kib;
}

// From before the producer makes the 1 GiB source until the Recv has
// filled its destination, the peak of both processes' Pss together, sampled
// every 2 ms, less what they held before: the memory moving 1 GiB costs.
void BM_PssOfOneGiB(benchmark::State& state) {
  constexpr int64_t kBytes = int64_t{1} << 30;
  WorkerServer* consumer = peers->ucx_consumer.get();
  const std::string key_text = KeyFor(*consumer);
  const ParsedKey key = *ParsedKey::Parse(key_text);
  for (auto _ : state) {
    const int64_t step = peers->next_step++;
    const int64_t before = PssOfBothKib();
    std::atomic<bool> moved{false};
    int64_t peak = before;
    std::thread sampler([&] {
      while (!moved.load(std::memory_order_acquire)) {
        peak = std::max(peak, PssOfBothKib());
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    Tensor value;
    bool is_dead;
    const bool ok = Produce(step, key_text, kBytes, 1) &&
                    consumer->rendezvous_mgr().Find(step)->Recv(key, {}, &value, &is_dead).ok();
    moved.store(true, std::memory_order_release);
    sampler.join();
    if (!ok) state.SkipWithError("Produce or Recv failed");
    peak = std::max(peak, PssOfBothKib());
    state.counters["pss_added_MiB"] = static_cast<double>(peak - before) / 1024;
    Cleanup(consumer, step);
  }
}
BENCHMARK(BM_PssOfOneGiB)->Iterations(1)->Unit(benchmark::kMillisecond);

void BM_RawGrpcUnary(benchmark::State& state) {
  FetchBytesRequest request;
  request.set_size(static_cast<uint64_t>(state.range(0)));
  for (auto _ : state) {
    grpc::ClientContext context;
    FetchBytesResponse response;
    const grpc::Status status = peers->driver->FetchBytes(&context, request, &response);
    if (!status.ok() || response.payload().size() != request.size()) {
      state.SkipWithError("FetchBytes failed");
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void Sizes(benchmark::internal::Benchmark* b) {
  b->Arg(64);
  for (int64_t bytes = 4 << 10; bytes <= (int64_t{256} << 20); bytes *= 4) b->Arg(bytes);
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}
BENCHMARK(BM_GrpcRecv)->Apply(Sizes);
BENCHMARK(BM_GrpcUcxRecv)->Apply(Sizes);
BENCHMARK(BM_RawGrpcUnary)->Apply(Sizes);

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  // Debian's Abseil checks every absl::Mutex acquisition for deadlock cycles
  // under a global lock, gRPC's included; a program may turn that off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (const absl::Status started = rdv::control::StartPeers(); !started.ok()) {
    std::cerr << "rdv_bench_remote: cannot start the peer worker: " << started << "\n";
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  rdv::control::StopPeers();
  return 0;
}
