#include "control/options.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"

namespace rdv::control {
namespace {

// Reads a positive integer variable; leaves `value` alone when unset.
absl::Status ReadPositive(const char* name, int64_t min, int64_t max, int64_t* value) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(text, &parsed) || parsed < min || parsed > max) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, "='", text, "': expected an integer from ", min, " to ", max));
  }
  *value = parsed;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ControlOptions> ControlOptions::FromEnvironment() {
  ControlOptions options;
  int64_t timeout_ms = absl::ToInt64Milliseconds(options.peer_timeout);
  RDV_RETURN_IF_ERROR(ReadPositive("RDV_PEER_TIMEOUT_MS", 100, 3600 * 1000, &timeout_ms));
  options.peer_timeout = absl::Milliseconds(timeout_ms);
  int64_t chunk = static_cast<int64_t>(options.chunk_bytes);
  RDV_RETURN_IF_ERROR(ReadPositive("RDV_GRPC_CHUNK_BYTES", 4096, kMaxGrpcChunkBytes, &chunk));
  options.chunk_bytes = static_cast<size_t>(chunk);
  int64_t max_tensor = static_cast<int64_t>(options.max_tensor_bytes);
  RDV_RETURN_IF_ERROR(ReadPositive("RDV_MAX_TENSOR_BYTES", 1024, int64_t{1} << 50, &max_tensor));
  options.max_tensor_bytes = static_cast<uint64_t>(max_tensor);
  int64_t shutdown_ms = absl::ToInt64Milliseconds(options.shutdown_timeout);
  RDV_RETURN_IF_ERROR(ReadPositive("RDV_SHUTDOWN_TIMEOUT_MS", 100, 3600 * 1000, &shutdown_ms));
  options.shutdown_timeout = absl::Milliseconds(shutdown_ms);
  RDV_ASSIGN_OR_RETURN(options.security, SecurityOptions::FromEnvironment());
  RDV_LOG(Debug) << "RDV_PEER_TIMEOUT_MS=" << timeout_ms << " RDV_GRPC_CHUNK_BYTES=" << chunk
                 << " RDV_MAX_TENSOR_BYTES=" << max_tensor
                 << " TLS=" << (options.security.tls() ? "on" : "off")
                 << " cluster token=" << (options.security.token.empty() ? "none" : "set");
  return options;
}

}  // namespace rdv::control
