#include "core/cuda_settings.h"

#include <cstdint>
#include <string>

#include "core/environment.h"

namespace rdv::cuda {

absl::StatusOr<bool> IpcSetting() {
  std::string value = "1";
  RDV_RETURN_IF_ERROR(env::ReadChoice("RDV_CUDA_IPC", {"0", "1"}, &value));
  return value == "1";
}

absl::StatusOr<size_t> CacheBytesSetting() {
  uint64_t bytes = uint64_t{1} << 30;
  RDV_RETURN_IF_ERROR(env::ReadBytes("RDV_CUDA_CACHE_BYTES", SIZE_MAX, &bytes));
  return static_cast<size_t>(bytes);
}

absl::Status CheckSettings() {
  RDV_RETURN_IF_ERROR(IpcSetting().status());
  return CacheBytesSetting().status();
}

}  // namespace rdv::cuda
