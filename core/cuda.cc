// The CUDA API of a build with CUDA, on the runtime API (libcudart). Two
// driver calls (an allocation's range and its buffer id) come through
// cudaGetDriverEntryPointByVersion, so that rdv never links libcuda and
// still starts where no driver is installed.
#include "core/cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <array>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/caching_allocator.h"
#include "core/cuda_settings.h"
#include "core/logging.h"

namespace rdv::cuda {
namespace {

absl::Status CudaError(cudaError_t error, absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", cudaGetErrorName(error), " (",
                                          cudaGetErrorString(error), ")"));
}

struct Probe {
  int devices = 0;
  std::string reason;
};

const Probe& GetProbe() {
  static const Probe probe = [] {
    Probe p;
    const cudaError_t error = cudaGetDeviceCount(&p.devices);
    if (error != cudaSuccess) {
      p.devices = 0;
      p.reason = absl::StrCat("no usable CUDA device: ", cudaGetErrorName(error), " (",
                              cudaGetErrorString(error), ")");
      cudaGetLastError();  // the probe's error must not leak into later calls
    } else if (p.devices == 0) {
      p.reason = "no CUDA device found";
    }
    RDV_LOG(Debug) << "CUDA devices: " << p.devices << (p.reason.empty() ? "" : "; ") << p.reason;
    return p;
  }();
  return probe;
}

constexpr unsigned kDriverApiVersion = 12000;

struct DriverCalls {
  decltype(&::cuMemGetAddressRange) address_range = nullptr;
  decltype(&::cuPointerGetAttribute) pointer_attribute = nullptr;
};

template <typename Fn>
void BindDriverCall(const char* symbol, Fn* fn) {
  void* found = nullptr;
  cudaDriverEntryPointQueryResult result{};
  if (cudaGetDriverEntryPointByVersion(symbol, &found, kDriverApiVersion, cudaEnableDefault,
                                       &result) == cudaSuccess &&
      result == cudaDriverEntryPointSuccess) {
    *fn = reinterpret_cast<Fn>(found);
  } else {
    cudaGetLastError();
    RDV_LOG(Warning) << "CUDA driver call " << symbol << " not found";
  }
}

const DriverCalls& Driver() {
  static const DriverCalls calls = [] {
    DriverCalls bound;
    BindDriverCall("cuMemGetAddressRange", &bound.address_range);
    BindDriverCall("cuPointerGetAttribute", &bound.pointer_attribute);
    return bound;
  }();
  return calls;
}

absl::Status CheckDevice(int device) {
  if (DeviceCount() == 0) return absl::FailedPreconditionError(UnavailableReason());
  if (device < 0 || device >= DeviceCount()) {
    return absl::InvalidArgumentError(
        absl::StrCat("CUDA device ", device, " does not exist; found ", DeviceCount()));
  }
  return absl::OkStatus();
}

class PinnedAllocator final : public Allocator {
 public:
  absl::string_view Name() const override { return "cuda-pinned-host"; }
  MemoryLocation Location() const override { return MemoryLocation::PinnedHost(); }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t error = cudaHostAlloc(&ptr, bytes, cudaHostAllocPortable);
    if (error != cudaSuccess) {
      return CudaError(error, absl::StrCat("cudaHostAlloc of ", bytes, " bytes"));
    }
    return ptr;
  }
  void Deallocate(void* ptr, size_t) override { cudaFreeHost(ptr); }
};

class CudaDeviceAllocator final : public Allocator {
 public:
  explicit CudaDeviceAllocator(int device)
      : device_(device), name_(absl::StrCat("cuda-device-", device)) {}
  absl::string_view Name() const override { return name_; }
  MemoryLocation Location() const override { return MemoryLocation::Cuda(device_); }
  absl::StatusOr<void*> Allocate(size_t bytes) override {
    cudaError_t error = cudaSetDevice(device_);
    void* ptr = nullptr;
    if (error == cudaSuccess) error = cudaMalloc(&ptr, bytes);
    if (error != cudaSuccess) {
      return CudaError(error, absl::StrCat("cudaMalloc of ", bytes, " bytes on device ", device_));
    }
    return ptr;
  }
  void Deallocate(void* ptr, size_t) override {
    cudaSetDevice(device_);
    cudaFree(ptr);
  }

 private:
  const int device_;
  const std::string name_;
};

enum class Direction { kHostToDevice = 0, kDeviceToHost = 1, kDeviceToDevice = 2 };
constexpr int kDirections = 3;

// One stream and the thread that waits for its copies, in order.
class CopyStream {
 public:
  static absl::StatusOr<CopyStream*> Create(int device) {
    cudaError_t error = cudaSetDevice(device);
    cudaStream_t stream = nullptr;
    if (error == cudaSuccess) error = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
    if (error != cudaSuccess) return CudaError(error, "creating a copy stream");
    // Lives for the whole process: completions may arrive until exit.
    auto* copy_stream = new CopyStream(device, stream);
    std::thread([copy_stream] { copy_stream->CompletionLoop(); }).detach();
    return copy_stream;
  }

  void Enqueue(const void* src, void* dst, size_t bytes, int peer_device, CopyDone done) {
    std::lock_guard lock(mu_);
    cudaError_t error = cudaSetDevice(device_);
    if (error == cudaSuccess) {
      error = peer_device >= 0 && peer_device != device_
                  ? cudaMemcpyPeerAsync(dst, device_, src, peer_device, bytes, stream_)
                  : cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_);
    }
    cudaEvent_t event = nullptr;
    if (error == cudaSuccess) error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (error == cudaSuccess) error = cudaEventRecord(event, stream_);
    if (error != cudaSuccess && event != nullptr) {
      cudaEventDestroy(event);
      event = nullptr;
    }
    // Errors, too, complete on the completion thread, in order.
    pending_.push_back({event,
                        error == cudaSuccess ? absl::OkStatus()
                                             : CudaError(error, "starting a DMA copy"),
                        std::move(done)});
    pending_cv_.notify_one();
  }

 private:
  struct Pending {
    cudaEvent_t event;
    absl::Status status;
    CopyDone done;
  };

  CopyStream(int device, cudaStream_t stream) : device_(device), stream_(stream) {}

  [[noreturn]] void CompletionLoop() {
    for (;;) {
      Pending next;
      {
        std::unique_lock lock(mu_);
        pending_cv_.wait(lock, [this] { return !pending_.empty(); });
        next = std::move(pending_.front());
        pending_.pop_front();
      }
      if (next.event != nullptr) {
        const cudaError_t error = cudaEventSynchronize(next.event);
        if (error != cudaSuccess) next.status = CudaError(error, "DMA copy");
        cudaEventDestroy(next.event);
      }
      std::move(next.done)(next.status);
    }
  }

  const int device_;
  const cudaStream_t stream_;
  std::mutex mu_;  // guards pending_ and keeps copies in queue order
  std::condition_variable pending_cv_;
  std::deque<Pending> pending_;
};

absl::StatusOr<CopyStream*> StreamFor(int device, Direction direction) {
  static std::mutex mu;
  static auto* streams = new std::vector<std::array<CopyStream*, kDirections>>();
  std::lock_guard lock(mu);
  if (streams->empty()) streams->resize(static_cast<size_t>(DeviceCount()));
  CopyStream*& slot = (*streams)[static_cast<size_t>(device)][static_cast<size_t>(direction)];
  if (slot == nullptr) {
    RDV_ASSIGN_OR_RETURN(slot, CopyStream::Create(device));
  }
  return slot;
}

// Free memory each CUDA allocator keeps for reuse. A worker refused to
// start on a value that does not parse.
size_t CacheBytes() {
  static const size_t bytes = CacheBytesSetting().value_or(size_t{1} << 30);
  return bytes;
}

}  // namespace

bool CompiledIn() { return true; }
int DeviceCount() { return GetProbe().devices; }
std::string UnavailableReason() { return GetProbe().reason; }

absl::StatusOr<std::shared_ptr<Allocator>> PinnedHostAllocator() {
  if (DeviceCount() == 0) return absl::FailedPreconditionError(UnavailableReason());
  static const std::shared_ptr<Allocator> allocator =
      std::make_shared<CachingAllocator>(std::make_shared<PinnedAllocator>(), CacheBytes());
  return allocator;
}

absl::Status PinHostMemory(void* address, size_t bytes) {
  if (DeviceCount() == 0) return absl::FailedPreconditionError(UnavailableReason());
  if (const cudaError_t error = cudaHostRegister(address, bytes, cudaHostRegisterPortable);
      error != cudaSuccess) {
    cudaGetLastError();
    return CudaError(error, absl::StrCat("cudaHostRegister of ", bytes, " bytes"));
  }
  return absl::OkStatus();
}

void UnpinHostMemory(void* address) { cudaHostUnregister(address); }

absl::StatusOr<std::shared_ptr<Allocator>> DeviceAllocator(int device) {
  RDV_RETURN_IF_ERROR(CheckDevice(device));
  static std::mutex mu;
  static auto* allocators = new std::vector<std::shared_ptr<Allocator>>();
  std::lock_guard lock(mu);
  if (allocators->empty()) allocators->resize(static_cast<size_t>(DeviceCount()));
  auto& slot = (*allocators)[static_cast<size_t>(device)];
  if (slot == nullptr) {
    slot = std::make_shared<CachingAllocator>(std::make_shared<CudaDeviceAllocator>(device),
                                              CacheBytes());
  }
  return slot;
}

absl::StatusOr<DeviceAllocation> AllocationOf(const void* device_pointer) {
  if (DeviceCount() == 0) return absl::FailedPreconditionError(UnavailableReason());
  const DriverCalls& driver = Driver();
  if (driver.address_range == nullptr || driver.pointer_attribute == nullptr) {
    return absl::FailedPreconditionError(
        "the CUDA driver lacks cuMemGetAddressRange or cuPointerGetAttribute");
  }
  // cuMemGetAddressRange needs a current context, which a thread that never
  // called CUDA (a gRPC thread answering a Recv) lacks: make the pointer's
  // device current first.
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, device_pointer) != cudaSuccess ||
      attributes.type != cudaMemoryTypeDevice || cudaSetDevice(attributes.device) != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(
        absl::StrCat(absl::Hex(device_pointer), " is not CUDA device memory"));
  }
  const auto pointer = reinterpret_cast<CUdeviceptr>(device_pointer);
  CUdeviceptr base = 0;
  size_t size = 0;
  unsigned long long buffer_id = 0;
  if (driver.address_range(&base, &size, pointer) != CUDA_SUCCESS ||
      driver.pointer_attribute(&buffer_id, CU_POINTER_ATTRIBUTE_BUFFER_ID, pointer) !=
          CUDA_SUCCESS) {
    return absl::InvalidArgumentError(
        absl::StrCat(absl::Hex(pointer), " is not inside a CUDA device allocation"));
  }
  return DeviceAllocation{static_cast<uintptr_t>(base), size, buffer_id};
}

void CopyAsync(const void* src, MemoryLocation src_location, void* dst,
               MemoryLocation dst_location, size_t bytes, CopyDone done) {
  const bool src_device = src_location.kind == MemoryKind::kCudaDevice;
  const bool dst_device = dst_location.kind == MemoryKind::kCudaDevice;
  if (!src_device && !dst_device) {
    std::move(done)(absl::InvalidArgumentError("cuda::CopyAsync: neither side is device memory"));
    return;
  }
  const Direction direction = src_device && dst_device ? Direction::kDeviceToDevice
                              : dst_device            ? Direction::kHostToDevice
                                                      : Direction::kDeviceToHost;
  // Device-to-device copies run on the destination's stream and pull from
  // the source device; the others run on the one device involved.
  const int device = dst_device ? dst_location.device : src_location.device;
  absl::Status status = CheckDevice(device);
  if (status.ok() && src_device) status = CheckDevice(src_location.device);
  absl::StatusOr<CopyStream*> stream = status.ok() ? StreamFor(device, direction) : status;
  if (!stream.ok()) {
    std::move(done)(stream.status());
    return;
  }
  (*stream)->Enqueue(src, dst, bytes, src_device ? src_location.device : -1, std::move(done));
}

}  // namespace rdv::cuda
