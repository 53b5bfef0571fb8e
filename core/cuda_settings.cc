#include "core/cuda_settings.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace rdv::cuda {

absl::StatusOr<bool> IpcSetting() {
  const char* text = std::getenv("RDV_CUDA_IPC");
  const absl::string_view value = text != nullptr ? text : "";
  if (value.empty() || value == "1") return true;
  if (value == "0") return false;
  return absl::InvalidArgumentError(absl::StrCat("RDV_CUDA_IPC='", value, "': expected 0 or 1"));
}

absl::StatusOr<size_t> CacheBytesSetting() {
  const char* text = std::getenv("RDV_CUDA_CACHE_BYTES");
  size_t bytes = size_t{1} << 30;
  if (text != nullptr && *text != '\0' && !absl::SimpleAtoi(text, &bytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RDV_CUDA_CACHE_BYTES='", text, "': expected a byte count"));
  }
  return bytes;
}

absl::Status CheckSettings() {
  RDV_RETURN_IF_ERROR(IpcSetting().status());
  return CacheBytesSetting().status();
}

}  // namespace rdv::cuda
