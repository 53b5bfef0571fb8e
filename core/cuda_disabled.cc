// The CUDA API of a build without CUDA: every call explains why it fails.
#include "core/cuda.h"
#include "core/cuda_ipc.h"

namespace rdv::cuda {
namespace {

absl::Status NotBuilt() {
  return absl::FailedPreconditionError(
      "rdv was built without CUDA; install the CUDA toolkit in /usr/local/cuda and configure "
      "with -DRDV_WITH_CUDA=ON");
}

}  // namespace

bool CompiledIn() { return false; }
int DeviceCount() { return 0; }
std::string UnavailableReason() { return std::string(NotBuilt().message()); }
absl::StatusOr<std::shared_ptr<Allocator>> PinnedHostAllocator() { return NotBuilt(); }
absl::StatusOr<std::shared_ptr<Allocator>> DeviceAllocator(int) { return NotBuilt(); }
absl::Status PinHostMemory(void*, size_t) { return NotBuilt(); }
void UnpinHostMemory(void*) {}

absl::StatusOr<DeviceAllocation> AllocationOf(const void*) { return NotBuilt(); }

bool IpcEnabled() { return false; }

const std::string& HostId() {
  static const std::string none;
  return none;
}

absl::StatusOr<IpcExport> ExportIpc(const void*) { return NotBuilt(); }

absl::StatusOr<std::shared_ptr<void>> OpenIpc(absl::string_view, uint64_t, int) {
  return NotBuilt();
}

void CopyAsync(const void*, MemoryLocation, void*, MemoryLocation, size_t, CopyDone done) {
  std::move(done)(NotBuilt());
}

}  // namespace rdv::cuda
