// GPU copies through rdv beside cudaMemcpy of the same bytes, in one
// process (the bars of bench/gpu/check.sh):
//   BM_RdvRecv/<direction>/<bytes>: a Send and a Recv through
//     IntraProcessRendezvous, across devices, waiting for the DMA copy.
//     h2d: pinned host tensor to GPU 0; d2h: GPU 0 to (pinned) host;
//     d2d: GPU 0 to GPU 1, or with one GPU a CopyTensor on GPU 0 (a Recv
//     on the same GPU shares the buffer and copies nothing).
//   BM_CudaMemcpy/<direction>/<bytes>: cudaMemcpyAsync on a stream, then
//     a stream synchronize, between buffers allocated once.
// Without a GPU every benchmark reports the reason as its error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "benchmark/benchmark.h"
#include "core/cuda.h"
#include "core/device_copy.h"
#include "core/intra_process_rendezvous.h"
#include "core/notification.h"

namespace rdv {
namespace {

enum Direction : int64_t { kH2D = 0, kD2H = 1, kD2D = 2 };

const char* DirectionName(int64_t direction) {
  return direction == kH2D ? "h2d" : direction == kD2H ? "d2h" : "d2d";
}

constexpr char kCpu[] = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr char kGpu0[] = "/job:worker/replica:0/task:0/device:GPU:0";
constexpr char kGpu1[] = "/job:worker/replica:0/task:0/device:GPU:1";

bool SkipWithoutGpu(benchmark::State& state) {
  if (cuda::DeviceCount() > 0) return false;
  state.SkipWithError(cuda::UnavailableReason().c_str());
  return true;
}

absl::StatusOr<Tensor> Filled(MemoryLocation where, int64_t bytes) {
  RDV_ASSIGN_OR_RETURN(std::shared_ptr<Allocator> pinned, cuda::PinnedHostAllocator());
  RDV_ASSIGN_OR_RETURN(Tensor host,
                       Tensor::Allocate(std::move(pinned), DType::kUInt8,
                                        *TensorShape::Create({bytes})));
  std::fill_n(static_cast<char*>(host.data()), bytes, 7);
  if (where.is_host()) return host;
  return CopyTensor(host, where);
}

// One Send and one Recv of `value` under `key`, waiting for the copy.
absl::Status SendRecv(IntraProcessRendezvous& rendezvous, const ParsedKey& key,
                      const Tensor& value) {
  RDV_RETURN_IF_ERROR(rendezvous.Send(key, {}, value, false));
  Notification done;
  absl::Status status;
  rendezvous.RecvAsync(key, {},
                       [&](const absl::Status& s, const RendezvousArgs&, const RendezvousArgs&,
                           const Tensor& received, bool) {
                         status = s;
                         benchmark::DoNotOptimize(received.data());
                         done.Notify();
                       });
  done.WaitForNotification();
  return status;
}

void BM_RdvRecv(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  const int64_t direction = state.range(0);
  const int64_t bytes = state.range(1);
  const bool two_gpus = cuda::DeviceCount() > 1;
  const char* src = direction == kH2D ? kCpu : kGpu0;
  const char* dst = direction == kD2H ? kCpu : direction == kH2D ? kGpu0 : kGpu1;
  absl::StatusOr<Tensor> value =
      Filled(direction == kH2D ? MemoryLocation::PinnedHost() : MemoryLocation::Cuda(0), bytes);
  if (!value.ok()) {
    state.SkipWithError(std::string(value.status().message()).c_str());
    return;
  }
  IntraProcessRendezvous rendezvous;
  const ParsedKey key = *ParsedKey::Parse(CreateRendezvousKey(src, 1, dst, "edge_1_gpu"));
  for (auto _ : state) {
    const absl::Status status = direction == kD2D && !two_gpus
                                    ? CopyTensor(*value, MemoryLocation::Cuda(0)).status()
                                    : SendRecv(rendezvous, key, *value);
    if (!status.ok()) {
      state.SkipWithError(std::string(status.message()).c_str());
      return;
    }
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.SetLabel(DirectionName(direction));
}

void BM_CudaMemcpy(benchmark::State& state) {
  if (SkipWithoutGpu(state)) return;
  const int64_t direction = state.range(0);
  const auto bytes = static_cast<size_t>(state.range(1));
  void* host = nullptr;
  void* device_a = nullptr;
  void* device_b = nullptr;
  cudaStream_t stream = nullptr;
  cudaError_t error = cudaSetDevice(0);
  if (error == cudaSuccess) error = cudaHostAlloc(&host, bytes, cudaHostAllocPortable);
  if (error == cudaSuccess) error = cudaMalloc(&device_a, bytes);
  if (error == cudaSuccess) error = cudaMalloc(&device_b, bytes);
  if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  void* const dst = direction == kD2H ? host : device_b;
  const void* const src = direction == kH2D ? host : device_a;
  for (auto _ : state) {
    if (error != cudaSuccess) break;
    error = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream);
    if (error == cudaSuccess) error = cudaStreamSynchronize(stream);
  }
  if (error != cudaSuccess) state.SkipWithError(cudaGetErrorString(error));
  if (stream != nullptr) cudaStreamDestroy(stream);
  cudaFree(device_b);
  cudaFree(device_a);
  cudaFreeHost(host);
  state.SetBytesProcessed(state.iterations() * state.range(1));
  state.SetLabel(DirectionName(direction));
}

void Sizes(benchmark::internal::Benchmark* bench) {
  bench->ArgNames({"direction", "bytes"});
  for (int64_t direction : {kH2D, kD2H, kD2D}) {
    for (int64_t bytes : {int64_t{1} << 20, int64_t{64} << 20, int64_t{256} << 20}) {
      bench->Args({direction, bytes});
    }
  }
  bench->UseRealTime();
}

BENCHMARK(BM_RdvRecv)->Apply(Sizes);
BENCHMARK(BM_CudaMemcpy)->Apply(Sizes);

}  // namespace
}  // namespace rdv

BENCHMARK_MAIN();
