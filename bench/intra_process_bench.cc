// Intra-process rendezvous benchmarks. BM_IntraProcessSendRecv/<bytes> is
// one Send plus one Recv of a host tensor on one thread; host tensors are
// shared, not copied, so the time must not depend on the size.
// BM_HostMemcpy/<bytes> is the peer: what copying the same bytes would cost.
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/intra_process_rendezvous.h"

namespace rdv {
namespace {

constexpr char kSrc[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kDst[] = "/job:worker/replica:0/task:0/device:CPU:1";

ParsedKey BenchKey(const std::string& name) {
  return *ParsedKey::Parse(CreateRendezvousKey(kSrc, 1, kDst, name));
}

Tensor HostTensor(int64_t bytes) {
  Tensor t = *Tensor::Allocate(HostAllocator(), DType::kUInt8, *TensorShape::Create({bytes}));
  std::memset(t.data(), 1, static_cast<size_t>(bytes));
  return t;
}

void BM_IntraProcessSendRecv(benchmark::State& state) {
  IntraProcessRendezvous rendezvous;
  const ParsedKey key = BenchKey("edge_1_bench");
  const Tensor tensor = HostTensor(state.range(0));
  const void* received = nullptr;
  for (auto _ : state) {
    (void)rendezvous.Send(key, {}, tensor, false);
    rendezvous.RecvAsync(key, {},
                         [&received](const absl::Status&, const RendezvousArgs&,
                                     const RendezvousArgs&, const Tensor& v,
                                     bool) { received = v.data(); });
    benchmark::DoNotOptimize(received);
  }
  if (received != tensor.data()) state.SkipWithError("the Recv did not get the sent buffer");
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_IntraProcessSendRecv)->Arg(1 << 10)->Arg(1 << 30);

void BM_HostMemcpy(benchmark::State& state) {
  const Tensor src = HostTensor(state.range(0));
  const Tensor dst = HostTensor(state.range(0));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(state.range(0)));
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_HostMemcpy)->Arg(1 << 10)->Arg(1 << 30);

// Each thread sends to and receives from its own 1024 keys, so threads
// meet only on the shared table.
void BM_IntraProcessThroughput(benchmark::State& state) {
  static IntraProcessRendezvous* rendezvous = nullptr;
  if (state.thread_index() == 0) rendezvous = new IntraProcessRendezvous();
  constexpr int kKeys = 1024;
  std::vector<ParsedKey> keys;
  for (int i = 0; i < kKeys; ++i) keys.push_back(BenchKey(absl::StrCat("t", state.thread_index(), "_", i)));
  const Tensor tensor = HostTensor(1024);
  int64_t pairs = 0;
  for (auto _ : state) {
    for (const ParsedKey& key : keys) (void)rendezvous->Send(key, {}, tensor, false);
    for (const ParsedKey& key : keys) {
      rendezvous->RecvAsync(key, {}, [](const absl::Status&, const RendezvousArgs&,
                                        const RendezvousArgs&, const Tensor&, bool) {});
    }
    pairs += kKeys;
  }
  state.SetItemsProcessed(pairs);
  if (state.thread_index() == 0) {
    delete rendezvous;
    rendezvous = nullptr;
  }
}
BENCHMARK(BM_IntraProcessThroughput)->Threads(1)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace rdv

BENCHMARK_MAIN();
