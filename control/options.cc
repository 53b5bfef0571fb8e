#include "control/options.h"

#include <utility>

#include "core/environment.h"
#include "core/logging.h"

namespace rdv::control {

absl::StatusOr<ControlOptions> ControlOptions::FromEnvironment(ControlOptions defaults) {
  ControlOptions options = std::move(defaults);
  RDV_RETURN_IF_ERROR(env::ReadMilliseconds("RDV_PEER_TIMEOUT_MS", absl::Milliseconds(100),
                                            absl::Hours(1), &options.peer_timeout));
  int64_t chunk = static_cast<int64_t>(options.chunk_bytes);
  RDV_RETURN_IF_ERROR(env::ReadInt("RDV_GRPC_CHUNK_BYTES", 4096, kMaxGrpcChunkBytes, &chunk));
  options.chunk_bytes = static_cast<size_t>(chunk);
  int64_t max_tensor = static_cast<int64_t>(options.max_tensor_bytes);
  RDV_RETURN_IF_ERROR(env::ReadInt("RDV_MAX_TENSOR_BYTES", 1024, int64_t{1} << 50, &max_tensor));
  options.max_tensor_bytes = static_cast<uint64_t>(max_tensor);
  RDV_RETURN_IF_ERROR(env::ReadMilliseconds("RDV_SHUTDOWN_TIMEOUT_MS", absl::Milliseconds(100),
                                            absl::Hours(1), &options.shutdown_timeout));
  RDV_ASSIGN_OR_RETURN(options.security, SecurityOptions::FromEnvironment());
  int64_t fast_path = options.fast_path ? 1 : 0;
  RDV_RETURN_IF_ERROR(env::ReadInt("RDV_FAST_PATH", 0, 1, &fast_path));
  options.fast_path = fast_path == 1;
  int64_t writes = options.fast_path_writes ? 1 : 0;
  RDV_RETURN_IF_ERROR(env::ReadInt("RDV_FAST_PATH_WRITES", 0, 1, &writes));
  options.fast_path_writes = writes == 1;
  int64_t reads = options.fast_path_reads ? 1 : 0;
  RDV_RETURN_IF_ERROR(env::ReadInt("RDV_FAST_PATH_READS", 0, 1, &reads));
  options.fast_path_reads = reads == 1;
  uint64_t read_ahead = options.read_ahead_bytes;
  RDV_RETURN_IF_ERROR(env::ReadBytes("RDV_READ_AHEAD_BYTES", uint64_t{1} << 40, &read_ahead));
  options.read_ahead_bytes = static_cast<size_t>(read_ahead);
  RDV_LOG(Debug) << "RDV_PEER_TIMEOUT_MS=" << absl::ToInt64Milliseconds(options.peer_timeout)
                 << " RDV_GRPC_CHUNK_BYTES=" << chunk << " RDV_MAX_TENSOR_BYTES=" << max_tensor
                 << " TLS=" << (options.security.tls() ? "on" : "off")
                 << " cluster token=" << (options.security.token.empty() ? "none" : "set")
                 << " RDV_FAST_PATH=" << fast_path << " RDV_FAST_PATH_WRITES=" << writes
                 << " RDV_FAST_PATH_READS=" << reads << " RDV_READ_AHEAD_BYTES=" << read_ahead;
  return options;
}

absl::StatusOr<ControlOptions> ControlOptions::FromEnvironment() {
  return FromEnvironment(ControlOptions());
}

absl::StatusOr<DataPlaneOptions> DataPlaneOptions::FromEnvironment() {
  return FromEnvironment(DataPlaneOptions());
}

absl::StatusOr<DataPlaneOptions> DataPlaneOptions::FromEnvironment(DataPlaneOptions defaults) {
  DataPlaneOptions options = std::move(defaults);
  for (auto [name, bytes] : {std::pair{"RDV_INLINE_BYTES", &options.inline_bytes},
                             std::pair{"RDV_POOL_CACHE_BYTES", &options.pool_cache_bytes},
                             std::pair{"RDV_REGISTRATION_CACHE_BYTES",
                                       &options.registration_cache_bytes}}) {
    uint64_t value = *bytes;
    RDV_RETURN_IF_ERROR(env::ReadBytes(name, SIZE_MAX, &value));
    *bytes = static_cast<size_t>(value);
  }
  RDV_LOG(Debug) << "RDV_INLINE_BYTES=" << options.inline_bytes
                 << " RDV_POOL_CACHE_BYTES=" << options.pool_cache_bytes
                 << " RDV_REGISTRATION_CACHE_BYTES=" << options.registration_cache_bytes;
  return options;
}

}  // namespace rdv::control
