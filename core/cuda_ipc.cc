// CUDA IPC on the runtime API.
#include "core/cuda_ipc.h"

#include <cuda_runtime_api.h>

#include <cstring>
#include <fstream>
#include <list>
#include <map>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "core/cuda.h"
#include "core/cuda_settings.h"

namespace rdv::cuda {
namespace {

// Open mappings kept for reuse beyond those in use.
constexpr size_t kMappingsKept = 64;

// Open IPC mappings by (handle, buffer id), least recently used first.
class MappingCache {
 public:
  absl::StatusOr<std::shared_ptr<void>> Open(absl::string_view handle, uint64_t buffer_id,
                                             int device) {
    std::lock_guard lock(mu_);
    const Key key{std::string(handle), buffer_id};
    if (auto it = index_.find(key); it != index_.end()) {
      order_.splice(order_.end(), order_, it->second);
      return it->second->mapping;
    }
    cudaIpcMemHandle_t ipc_handle;
    std::memcpy(&ipc_handle, handle.data(), sizeof(ipc_handle));
    void* base = nullptr;
    cudaError_t error = cudaSetDevice(device);
    if (error == cudaSuccess) {
      error = cudaIpcOpenMemHandle(&base, ipc_handle, cudaIpcMemLazyEnablePeerAccess);
    }
    if (error != cudaSuccess) {
      cudaGetLastError();
      return absl::FailedPreconditionError(absl::StrCat(
          "opening the producer's CUDA IPC handle on device ", device, ": ",
          cudaGetErrorName(error), " (", cudaGetErrorString(error),
          "); processes in different containers or PID namespaces cannot share GPU memory, "
          "set RDV_CUDA_IPC=0 to stage through host memory instead"));
    }
    std::shared_ptr<void> mapping(base, [device](void* opened) {
      cudaSetDevice(device);
      cudaIpcCloseMemHandle(opened);
    });
    order_.push_back({key, mapping});
    index_[key] = std::prev(order_.end());
    Trim();
    return mapping;
  }

 private:
  using Key = std::pair<std::string, uint64_t>;
  struct Entry {
    Key key;
    std::shared_ptr<void> mapping;
  };

  // Drops the oldest unused mappings; a copy in flight still holds its own.
  void Trim() {
    for (auto it = order_.begin(); order_.size() > kMappingsKept && it != order_.end();) {
      if (it->mapping.use_count() > 1) {
        ++it;
        continue;
      }
      index_.erase(it->key);
      it = order_.erase(it);
    }
  }

  std::mutex mu_;
  std::list<Entry> order_;                                   // mu_
  std::map<Key, std::list<Entry>::iterator> index_;          // mu_
};

}  // namespace

bool IpcEnabled() {
  // A worker refused to start on a value that does not parse.
  static const bool enabled = IpcSetting().value_or(false) && DeviceCount() > 0;
  return enabled;
}

const std::string& HostId() {
  static const std::string id = [] {
    std::ifstream file("/proc/sys/kernel/random/boot_id");
    std::string line;
    std::getline(file, line);
    return std::string(absl::StripAsciiWhitespace(line));
  }();
  return id;
}

absl::StatusOr<IpcExport> ExportIpc(const void* device_pointer) {
  RDV_ASSIGN_OR_RETURN(const DeviceAllocation allocation, AllocationOf(device_pointer));
  cudaIpcMemHandle_t handle;
  if (const cudaError_t error =
          cudaIpcGetMemHandle(&handle, reinterpret_cast<void*>(allocation.base));
      error != cudaSuccess) {
    cudaGetLastError();
    return absl::InvalidArgumentError(absl::StrCat(
        "CUDA IPC: cudaIpcGetMemHandle (memory from cudaMalloc only): ", cudaGetErrorName(error),
        " (", cudaGetErrorString(error), ")"));
  }
  IpcExport exported;
  exported.handle.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  exported.offset = reinterpret_cast<uintptr_t>(device_pointer) - allocation.base;
  exported.buffer_id = allocation.buffer_id;
  return exported;
}

absl::StatusOr<std::shared_ptr<void>> OpenIpc(absl::string_view handle, uint64_t buffer_id,
                                              int device) {
  if (DeviceCount() == 0) return absl::FailedPreconditionError(UnavailableReason());
  if (handle.size() != sizeof(cudaIpcMemHandle_t)) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA IPC handle of ", handle.size(),
                                                   " bytes; expected ",
                                                   sizeof(cudaIpcMemHandle_t)));
  }
  if (device < 0 || device >= DeviceCount()) {
    return absl::InvalidArgumentError(absl::StrCat("CUDA device ", device, " does not exist"));
  }
  static auto* cache = new MappingCache();
  return cache->Open(handle, buffer_id, device);
}

}  // namespace rdv::cuda
