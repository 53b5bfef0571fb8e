// Memory registration: host memory, and GPU memory by dma-buf or
// nvidia-peermem.
#include "verbs/verbs_context.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <type_traits>

#include "plugin/plugin_support.h"

namespace rdv::verbs {

using plugin_support::SetError;

namespace {

// The CUDA driver, opened at run time so that the plugin neither needs the
// CUDA toolkit to build nor a GPU to load. Only what registration needs.
struct CudaDriver {
  using Result = int;  // CUresult; 0 is CUDA_SUCCESS
  using DevicePtr = unsigned long long;
  static constexpr int kDmaBufFd = 1;            // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
  static constexpr int kDmaBufSupported = 124;   // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED

  Result (*init)(unsigned) = nullptr;
  Result (*device_get)(int*, int) = nullptr;
  Result (*device_attribute)(int*, int, int) = nullptr;
  Result (*primary_retain)(void**, int) = nullptr;
  Result (*push)(void*) = nullptr;
  Result (*pop)(void**) = nullptr;
  Result (*address_range)(DevicePtr*, size_t*, DevicePtr) = nullptr;
  Result (*handle_for_range)(void*, DevicePtr, size_t, int, unsigned long long) = nullptr;

  // Null when there is no driver (or no GPU).
  static const CudaDriver* Get() {
    static const CudaDriver* driver = Open();
    return driver;
  }

 private:
  static const CudaDriver* Open() {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return nullptr;
    auto* driver = new CudaDriver;
    auto bind = [library](auto* function, const char* name) {
      *function = reinterpret_cast<std::remove_pointer_t<decltype(function)>>(dlsym(library, name));
      return *function != nullptr;
    };
    const bool complete = bind(&driver->init, "cuInit") &&
                          bind(&driver->device_get, "cuDeviceGet") &&
                          bind(&driver->device_attribute, "cuDeviceGetAttribute") &&
                          bind(&driver->primary_retain, "cuDevicePrimaryCtxRetain") &&
                          bind(&driver->push, "cuCtxPushCurrent_v2") &&
                          bind(&driver->pop, "cuCtxPopCurrent_v2") &&
                          bind(&driver->address_range, "cuMemGetAddressRange_v2");
    bind(&driver->handle_for_range, "cuMemGetHandleForAddressRange");  // CUDA >= 11.7
    if (!complete || driver->init(0) != 0) {
      delete driver;
      return nullptr;
    }
    return driver;
  }
};

}  // namespace

const char* GpuPathName(GpuPath path) {
  switch (path) {
    case GpuPath::kDmaBuf: return "dma-buf";
    case GpuPath::kPeerMem: return "nvidia-peermem";
    default: return "none";
  }
}

namespace {

bool PeerMemLoaded() {
  return access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
         access("/sys/module/nvidia_peermem/version", F_OK) == 0;
}

}  // namespace

GpuPath ChooseGpuPath(ibv_pd* pd, std::string* why) {
  const CudaDriver* cuda = CudaDriver::Get();
  if (cuda == nullptr) {
    *why = "no CUDA driver or GPU";
    return GpuPath::kNone;
  }
  int device = 0;
  int dma_buf = 0;
  if (cuda->handle_for_range != nullptr && cuda->device_get(&device, 0) == 0 &&
      cuda->device_attribute(&dma_buf, CudaDriver::kDmaBufSupported, device) == 0 && dma_buf) {
    // A registration of fd -1 fails with EBADF where dma-buf works, and
    // with EOPNOTSUPP / EPROTONOSUPPORT where the kernel or provider lacks it.
    errno = 0;
    ibv_mr* probe = ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0);
    if (probe != nullptr) ibv_dereg_mr(probe);
    if (errno != EOPNOTSUPP && errno != EPROTONOSUPPORT) {
      *why = "the driver, kernel and provider support dma-buf";
      return GpuPath::kDmaBuf;
    }
  }
  if (PeerMemLoaded()) {
    *why = "nvidia-peermem is loaded (no dma-buf)";
    return GpuPath::kPeerMem;
  }
  *why = "neither dma-buf support nor nvidia-peermem";
  return GpuPath::kNone;
}
int Register(Context* context, void* address, size_t length, void* owned,
             rdv_transport_memory_t* out, rdv_transport_error_t* error) {
  ibv_mr* mr = ibv_reg_mr(context->pd, address, length,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_WRITE);
  if (mr == nullptr) {
    const int err = errno;
    return SetError(error,
                    err == ENOMEM ? RDV_TRANSPORT_RESOURCE_EXHAUSTED
                                  : RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: ibv_reg_mr of %zu bytes at %p: %s%s", length, address,
                    std::strerror(err),
                    err == ENOMEM ? " (check `ulimit -l`: registered memory is pinned)" : "");
  }
  *out = reinterpret_cast<rdv_transport_memory_t>(new Memory{context, mr, owned});
  return RDV_TRANSPORT_OK;
}

// Registers the whole CUDA allocation around [address, +length): its other
// tensors then need no registration of their own.
int RegisterCuda(Context* context, void* address, size_t length, int device,
                 rdv_transport_memory_t* out, rdv_transport_error_t* error) {
  const CudaDriver* cuda = CudaDriver::Get();
  if (context->gpu_path == GpuPath::kNone || cuda == nullptr) {
    return SetError(error, RDV_TRANSPORT_UNIMPLEMENTED,
                    "verbs: GPU memory cannot be registered here (%s): load nvidia-peermem, or "
                    "use a kernel and driver with dma-buf support; rdv stages GPU tensors "
                    "through host memory meanwhile", GpuPathName(context->gpu_path));
  }
  void* cuda_context = nullptr;
  CudaDriver::DevicePtr base = 0;
  size_t size = 0;
  int cu_device = 0;
  if (cuda->device_get(&cu_device, device) != 0 ||
      cuda->primary_retain(&cuda_context, cu_device) != 0 || cuda->push(cuda_context) != 0) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT, "verbs: no CUDA device %d", device);
  }
  const bool ranged =
      cuda->address_range(&base, &size, reinterpret_cast<CudaDriver::DevicePtr>(address)) == 0;
  int code = RDV_TRANSPORT_OK;
  if (!ranged || reinterpret_cast<CudaDriver::DevicePtr>(address) + length > base + size) {
    code = SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: %zu bytes at %p are not inside one CUDA allocation", length, address);
  } else if (context->gpu_path == GpuPath::kDmaBuf) {
    int fd = -1;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t span = (size + page - 1) / page * page;
    if (cuda->handle_for_range(&fd, base, span, CudaDriver::kDmaBufFd, 0) != 0) {
      code = SetError(error, RDV_TRANSPORT_INTERNAL,
                      "verbs: cuMemGetHandleForAddressRange failed for %zu bytes", span);
    } else {
      ibv_mr* mr = ibv_reg_dmabuf_mr(context->pd, 0, span, base, fd,
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                         IBV_ACCESS_REMOTE_WRITE);
      const int err = errno;
      close(fd);
      code = mr != nullptr
                 ? (*out = reinterpret_cast<rdv_transport_memory_t>(new Memory{context, mr, nullptr}),
                    RDV_TRANSPORT_OK)
                 : ErrnoError(error, RDV_TRANSPORT_INTERNAL, "ibv_reg_dmabuf_mr", err);
    }
  } else {
    code = Register(context, reinterpret_cast<void*>(base), size, nullptr, out, error);
  }
  void* popped = nullptr;
  cuda->pop(&popped);
  return code;
}

}  // namespace rdv::verbs
