// The settings the cross-process conformance suite (remote_conformance.h)
// runs on: a protocol, the environment both workers run it under, and the
// subsets that narrower suites of it are instantiated on.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"
#include "ucx/ucx_segment_sizes.h"

namespace rdv::control::remote_test {

// A protocol and the environment both workers run it under.
struct ProtocolSetting {
  const char* name;      // test name suffix
  const char* protocol;  // --protocol
  const char* ucx_tls;   // UCX_TLS, or null
  bool needs_rdma = false;  // runs on an RDMA device (tests/softroce runs it)
  const char* ucx_op = nullptr;  // RDV_UCX_OP, or null
  bool fast_path = false;        // RDV_FAST_PATH on both workers
  bool fast_path_writes = false;  // RDV_FAST_PATH_WRITES on both workers
  bool fast_path_reads = false;   // RDV_FAST_PATH_READS on both workers
  const char* ucx_memory = nullptr;  // RDV_UCX_MEMORY, or null
};

// ctest lists each case under the setting's name.
inline void PrintTo(const ProtocolSetting& setting, std::ostream* out) { *out << setting.name; }
inline std::string SettingName(const ::testing::TestParamInfo<ProtocolSetting>& info) {
  return info.param.name;
}

// Every setting the suite runs on.
inline std::vector<ProtocolSetting> ConformanceSettings() {
  return {
      ProtocolSetting{"grpc", "grpc", nullptr},
      ProtocolSetting{"grpc_ucx_tcp", "grpc+ucx", "tcp"},
      ProtocolSetting{"grpc_ucx_shm", "grpc+ucx", "posix,cma,self"},
      // Gets forced where UCX serves them in software: a user's choice
      // (RDV_UCX_OP), and the one transfer a lost peer leaves for the
      // control plane to end.
      ProtocolSetting{"grpc_ucx_shm_get", "grpc+ucx", "posix,cma,self", false, "get", false,
                      false, false, "anonymous"},
      ProtocolSetting{"grpc_verbs", "grpc+verbs", nullptr, true},
      // UCX over SoftRoCE needs UCX_UD_VERBS_ETH_DGID_CHECK=n.
      ProtocolSetting{"grpc_ucx_rdma", "grpc+ucx", "rc_verbs,ud_verbs", true},
      // Recvs of known keys without RecvTensor (RDV_FAST_PATH).
      ProtocolSetting{"grpc_ucx_tcp_fast", "grpc+ucx", "tcp", false, nullptr, true},
      ProtocolSetting{"grpc_ucx_shm_fast", "grpc+ucx", "posix,cma,self", false, nullptr, true},
      // The fast path's design B: the producer writes the consumer's
      // destination, then says so. Forced here (RDV_FAST_PATH_WRITES);
      // verbs and UCX over RDMA, whose producers are read from, always
      // write.
      ProtocolSetting{"grpc_ucx_shm_fast_write", "grpc+ucx", "posix,cma,self", false, nullptr,
                      true, true},
      // Design D: the consumer reads the value from the producer's mapped
      // pool, then releases it (RDV_FAST_PATH_READS, RDV_UCX_MEMORY=mapped).
      ProtocolSetting{"grpc_ucx_shm_fast_read", "grpc+ucx", "posix,cma,self", false, "get",
                      true, false, true, "mapped"},
      ProtocolSetting{"grpc_verbs_fast", "grpc+verbs", nullptr, true, nullptr, true},
      ProtocolSetting{"grpc_ucx_rdma_fast", "grpc+ucx", "rc_verbs,ud_verbs", true, nullptr, true},
  };
}

inline std::vector<ProtocolSetting> SettingsWhere(bool (*holds)(const ProtocolSetting&)) {
  std::vector<ProtocolSetting> settings = ConformanceSettings();
  std::erase_if(settings, [&](const ProtocolSetting& setting) { return !holds(setting); });
  return settings;
}
inline bool HasDataPlane(const ProtocolSetting& setting) {
  return std::string_view(setting.protocol) != "grpc";
}
inline bool IsUcx(const ProtocolSetting& setting) {
  return absl::StrContains(setting.protocol, "ucx");
}
inline bool HasFastPath(const ProtocolSetting& setting) { return setting.fast_path; }
// The consumer reads every value through the data plane: its transport is
// read from (verbs, UCX over RDMA) or told so (RDV_UCX_OP=get).
inline bool ReadsEveryValue(const ProtocolSetting& setting) {
  return setting.needs_rdma ||
         (setting.ucx_op != nullptr && std::string_view(setting.ucx_op) == "get");
}
// The producer lends values in its pool's mapped segments (256 KiB and
// more) to be read: UCX between processes of one host, with RDV_UCX_MEMORY
// at its default (mapped there) or mapped.
inline bool LendsMappedValues(const ProtocolSetting& setting) {
  const bool same_host = setting.ucx_tls != nullptr &&
                         std::string_view(setting.ucx_tls) == "posix,cma,self";
  const bool mapped = setting.ucx_memory == nullptr ||
                      std::string_view(setting.ucx_memory) != "anonymous";
  return same_host && mapped;
}
// ... and one of `bytes` is in such a segment.
inline bool LendsMappedValue(const ProtocolSetting& setting, int64_t bytes) {
  return LendsMappedValues(setting) && bytes >= static_cast<int64_t>(ucx_plugin::kMinSegmentBytes);
}

}  // namespace rdv::control::remote_test
