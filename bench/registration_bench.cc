// The data plane's hot-path bookkeeping against a real transport:
// BM_RegistrationCacheHit, a lookup of a buffer registered before (what
// every warm transfer of a foreign buffer costs); BM_PoolReuse, a tensor
// carved from the transport's pool and given back (what every warm transfer
// of rdv-allocated memory costs); BM_Register, a registration from scratch
// (what the cache saves, and what each Recv of the fast path's design B
// pays: its destination registered for its one transfer), all for the size
// in the name. RDV_BENCH_TRANSPORT names the plugin (default ucx; verbs in
// the SoftRoCE guest).
#include <cstdlib>
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "plugin/registration_cache.h"
#include "plugin/transport_allocator.h"

namespace rdv::plugin {
namespace {

std::shared_ptr<Transport> Plugin() {
  static const auto transport = [] {
    const char* name = std::getenv("RDV_BENCH_TRANSPORT");
    return Transport::Load(name != nullptr ? name : "ucx");
  }();
  return transport.ok() ? *transport : nullptr;
}

constexpr char kNoPlugin[] = "the plugin RDV_BENCH_TRANSPORT names (default ucx) does not load";

void BM_RegistrationCacheHit(benchmark::State& state) {
  if (Plugin() == nullptr) return state.SkipWithError(kNoPlugin);
  RegistrationCache cache(Plugin(), nullptr, size_t{4} << 30);
  std::vector<char> storage(static_cast<size_t>(state.range(0)));
  auto buffer = Buffer::Wrap(storage.data(), storage.size(), MemoryLocation::Host(), nullptr);
  if (!cache.Lookup(buffer).ok()) return state.SkipWithError("registration failed");
  for (auto _ : state) benchmark::DoNotOptimize(cache.Lookup(buffer));
  state.counters["hits"] = static_cast<double>(cache.stats().hits);
}

void BM_PoolReuse(benchmark::State& state) {
  if (Plugin() == nullptr) return state.SkipWithError(kNoPlugin);
  auto pool = std::make_shared<TransportAllocator>(Plugin(), size_t{1} << 30);
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    auto memory = pool->Allocate(size);
    if (!memory.ok()) return state.SkipWithError("pool allocation failed");
    pool->Deallocate(*memory, size);
  }
  state.counters["registrations"] = static_cast<double>(pool->stats().registrations);
}

void BM_Register(benchmark::State& state) {
  if (Plugin() == nullptr) return state.SkipWithError(kNoPlugin);
  std::vector<char> storage(static_cast<size_t>(state.range(0)), 1);
  for (auto _ : state) {
    auto memory = Plugin()->Register(storage.data(), storage.size());
    if (!memory.ok()) return state.SkipWithError("registration failed");
  }
}

BENCHMARK(BM_RegistrationCacheHit)->Arg(4 << 10)->Arg(64 << 20);
BENCHMARK(BM_PoolReuse)->Arg(4 << 10)->Arg(64 << 20);
BENCHMARK(BM_Register)
    ->Arg(4 << 10)
    ->Arg(64 << 10)
    ->Arg(64 << 20)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rdv::plugin
