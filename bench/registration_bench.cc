// The data plane's hot-path bookkeeping against the real UCX transport:
// BM_RegistrationCacheHit, a lookup of a buffer registered before (what
// every warm transfer of a foreign buffer costs); BM_PoolReuse, a tensor
// carved from the transport's pool and given back (what every warm transfer
// of rdv-allocated memory costs); BM_Register, a registration from scratch
// (what the cache saves), all for the size in the name.
#include <memory>
#include <vector>

#include "benchmark/benchmark.h"
#include "plugin/registration_cache.h"
#include "plugin/transport_allocator.h"

namespace rdv::plugin {
namespace {

std::shared_ptr<Transport> Ucx() {
  static const auto transport = Transport::Load("ucx");
  return transport.ok() ? *transport : nullptr;
}

void BM_RegistrationCacheHit(benchmark::State& state) {
  if (Ucx() == nullptr) return state.SkipWithError("the UCX plugin does not load");
  RegistrationCache cache(Ucx(), nullptr, size_t{4} << 30);
  std::vector<char> storage(static_cast<size_t>(state.range(0)));
  auto buffer = Buffer::Wrap(storage.data(), storage.size(), MemoryLocation::Host(), nullptr);
  if (!cache.Lookup(buffer).ok()) return state.SkipWithError("registration failed");
  for (auto _ : state) benchmark::DoNotOptimize(cache.Lookup(buffer));
  state.counters["hits"] = static_cast<double>(cache.stats().hits);
}

void BM_PoolReuse(benchmark::State& state) {
  if (Ucx() == nullptr) return state.SkipWithError("the UCX plugin does not load");
  auto pool = std::make_shared<TransportAllocator>(Ucx(), size_t{1} << 30);
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    auto memory = pool->Allocate(size);
    if (!memory.ok()) return state.SkipWithError("pool allocation failed");
    pool->Deallocate(*memory, size);
  }
  state.counters["registrations"] = static_cast<double>(pool->stats().registrations);
}

void BM_Register(benchmark::State& state) {
  if (Ucx() == nullptr) return state.SkipWithError("the UCX plugin does not load");
  std::vector<char> storage(static_cast<size_t>(state.range(0)), 1);
  for (auto _ : state) {
    auto memory = Ucx()->Register(storage.data(), storage.size());
    if (!memory.ok()) return state.SkipWithError("registration failed");
  }
}

BENCHMARK(BM_RegistrationCacheHit)->Arg(4 << 10)->Arg(64 << 20);
BENCHMARK(BM_PoolReuse)->Arg(4 << 10)->Arg(64 << 20);
BENCHMARK(BM_Register)->Arg(4 << 10)->Arg(64 << 20)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace rdv::plugin
