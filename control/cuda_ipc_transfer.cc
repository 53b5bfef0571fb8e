#include "control/cuda_ipc_transfer.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "core/cuda.h"
#include "core/cuda_ipc.h"

namespace rdv::control {

void RequestCudaIpc(MemoryLocation destination, RecvTensorRequest* request) {
  if (destination.is_host() || !cuda::IpcEnabled() || cuda::HostId().empty()) return;
  request->set_consumer_host_id(cuda::HostId());
  request->set_consumer_accepts_cuda_ipc(true);
  request->set_consumer_pid(getpid());
}

bool CudaIpcWanted(const RecvTensorRequest& request, const Tensor& value) {
  return request.consumer_accepts_cuda_ipc() && value.IsInitialized() &&
         value.location().kind == MemoryKind::kCudaDevice && value.TotalBytes() > 0 &&
         DTypeIsMemcpyable(value.dtype()) && cuda::IpcEnabled() &&
         request.consumer_host_id() == cuda::HostId() && request.consumer_pid() != getpid();
}

absl::StatusOr<CudaIpcDescriptor> LendByCudaIpc(int64_t step_id, const Tensor& value,
                                                const ConsumerWatcher& consumer,
                                                HeldTransfers* lent) {
  RDV_ASSIGN_OR_RETURN(cuda::IpcExport exported, cuda::ExportIpc(value.data()));
  CudaIpcDescriptor descriptor;
  descriptor.set_handle(std::move(exported.handle));
  descriptor.set_buffer_id(exported.buffer_id);
  descriptor.set_offset(exported.offset);
  descriptor.set_length(value.TotalBytes());
  descriptor.set_transfer_id(lent->Hold(step_id, value, nullptr, consumer));
  return descriptor;
}

void FetchByCudaIpc(const CudaIpcDescriptor& descriptor, Tensor destination,
                    absl::AnyInvocable<void(absl::Status) &&> done) {
  const MemoryLocation location = destination.location();
  if (location.kind != MemoryKind::kCudaDevice || destination.TotalBytes() != descriptor.length()) {
    std::move(done)(absl::DataLossError(absl::StrCat(
        "the producer lent ", descriptor.length(), " bytes by CUDA IPC for ",
        destination.DebugString(), " in ", location.ToString())));
    return;
  }
  absl::StatusOr<std::shared_ptr<void>> mapping =
      cuda::OpenIpc(descriptor.handle(), descriptor.buffer_id(), location.device);
  if (!mapping.ok()) {
    std::move(done)(mapping.status());
    return;
  }
  const char* source = static_cast<const char*>(mapping->get()) + descriptor.offset();
  cuda::CopyAsync(source, location, destination.data(), location, descriptor.length(),
                  [mapping = *std::move(mapping), destination,
                   done = std::move(done)](absl::Status status) mutable {
                    std::move(done)(std::move(status));
                  });
}

}  // namespace rdv::control
