// UCX_TLS as rdv reads it, and what rdv decides from it: gets or tagged
// sends, its tuned defaults, the settings it refuses.
#include "ucx/ucx_settings.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ucs/sys/string.h>

#include "plugin/plugin_support.h"

namespace rdv::ucx_plugin {
namespace {

using rdv::plugin_support::SetError;

// UCX_TLS as UCX reads it: a list of transport names, or of names to
// leave out when it starts with '^'. No names: unset, every transport.
struct TlsSetting {
  bool excluding = false;
  std::vector<std::string> names;

  bool Names(const std::string& name) const {
    return std::find(names.begin(), names.end(), name) != names.end();
  }
};

TlsSetting ReadTls() {
  TlsSetting setting;
  const char* tls = std::getenv("UCX_TLS");
  if (tls == nullptr) return setting;
  setting.excluding = tls[0] == '^';
  for (const char* token = tls + (setting.excluding ? 1 : 0); *token != '\0';) {
    const size_t length = std::strcspn(token, ",");
    setting.names.emplace_back(token, length);
    token += length + (token[length] == ',' ? 1 : 0);
  }
  return setting;
}

// Whether UCX_TLS lets UCX open one of `members`, transports it may also
// name by one of `aliases`.
bool TlsMayUse(const std::vector<std::string>& members, const std::vector<std::string>& aliases) {
  const TlsSetting tls = ReadTls();
  if (tls.names.empty()) return true;
  auto named = [&](const std::string& name) { return tls.Names(name); };
  const bool alias_named = std::any_of(aliases.begin(), aliases.end(), named);
  if (tls.excluding) return !alias_named && !std::all_of(members.begin(), members.end(), named);
  return alias_named || tls.Names("all") || std::any_of(members.begin(), members.end(), named);
}

// A get reaches only the tensor its descriptor names when the NIC does it:
// an RDMA READ is bounded by the registered region. UCX serves a get over
// shared memory, tcp or ud in software, at any address of the producer it
// is asked for (a wrong one crashes the producer), and cma reads any
// address through the kernel. So a consumer gets only over RC or DC (with
// UD beside them for wireup, and self); otherwise the producer sends the
// bytes tagged and the consumer chooses where they land (docs/security.md:
// about 0.7x of a get's bandwidth at 64 MiB over shared memory).
bool OnlyConfiningTransports(const TlsSetting& tls) {
  if (tls.excluding || tls.names.empty()) return false;
  auto rdma = [](const std::string& name) {
    return name == "ib" || name.rfind("rc", 0) == 0 || name.rfind("dc", 0) == 0;
  };
  auto confining = [&](const std::string& name) {
    return rdma(name) || name.rfind("ud", 0) == 0 || name == "self";
  };
  return std::any_of(tls.names.begin(), tls.names.end(), rdma) &&
         std::all_of(tls.names.begin(), tls.names.end(), confining);
}

const std::vector<std::string> kMmTransports = {"posix", "sysv"};
const std::vector<std::string> kMmAliases = {"sm", "shm", "mm"};

// A UCX default rdv changes for its traffic, only where the user has set
// none of `user_variables` and UCX will open a transport that reads it
// (UCX warns of a setting no interface takes). UCX takes it by `key`, the
// name within the transport's table; a prefixed name is not accepted.
struct TunedDefault {
  const char* shown;  // in the transport's description
  std::vector<const char*> user_variables;
  const char* key;
  const char* value;
  std::vector<std::string> members;
  std::vector<std::string> aliases;
};

// Over tcp a rendezvous to a consumer (which has no endpoint of its own to
// the producer) arrives as active messages of up to the receive segment,
// each read and then copied: 64 KiB segments hold a 64 MiB transfer near
// 2 GB/s on loopback, 1 MiB ones match ucx_perftest's tag_bw.
// Over shared memory a get of memory UCX did not allocate travels as
// active messages of one segment each, copied in by the producer and out
// by the consumer: 8 KiB segments reach about 7 GB/s at 64 MiB, 56 KiB
// ones about 9.5 (the FIFO's length field is 16 bits: 64 KiB hangs).
// docs/configuration.md has both.
const TunedDefault kTunedDefaults[] = {
    {"UCX_TCP_RX_SEG_SIZE", {"UCX_TCP_RX_SEG_SIZE"}, "RX_SEG_SIZE", "1M", {"tcp"}, {}},
    {"UCX_{POSIX,SYSV}_SEG_SIZE",
     {"UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_MM_SEG_SIZE"},
     "MM_SEG_SIZE",
     "56K",
     kMmTransports,
     kMmAliases},
};

}  // namespace

// RDV_UCX_OP overrides; false for a value it does not know.
bool ReadPreferredOp(uint32_t* op) {
  const char* forced = std::getenv("RDV_UCX_OP");
  if (forced != nullptr && std::strcmp(forced, "auto") != 0) {
    if (std::strcmp(forced, "tag") != 0 && std::strcmp(forced, "get") != 0) return false;
    *op = std::strcmp(forced, "tag") == 0 ? RDV_TRANSPORT_OP_TAG : RDV_TRANSPORT_OP_GET;
    return true;
  }
  *op = OnlyConfiningTransports(ReadTls()) ? RDV_TRANSPORT_OP_GET : RDV_TRANSPORT_OP_TAG;
  return true;
}

// UCX's shared-memory transports with active-message segments, and the
// UCX_TLS names that take them in.
// Returns what it changed, for the transport's description.
std::string ApplyTunedDefaults(ucp_config_t* config,
                               const std::function<void(const std::string&)>& warn) {
  std::string applied;
  for (const TunedDefault& tuned : kTunedDefaults) {
    const bool user_set = std::any_of(tuned.user_variables.begin(), tuned.user_variables.end(),
                                      [](const char* name) { return std::getenv(name); });
    if (user_set || !TlsMayUse(tuned.members, tuned.aliases)) continue;
    const std::string setting = std::string(tuned.shown) + "=" + tuned.value;
    const ucs_status_t status = ucp_config_modify(config, tuned.key, tuned.value);
    if (status != UCS_OK) {
      warn(setting + " not applied: " + ucs_status_string(status));
      continue;
    }
    applied += ", " + setting;
  }
  return applied.empty() ? "" : applied + " (rdv's defaults)";
}

// UCX 1.13's shared-memory FIFO stores a message's length in 16 bits: with
// a segment of 64 KiB or more, transfers hang instead of failing. Refused
// here with the reason; 0 when every setting is safe.
int CheckSharedMemorySegments(rdv_transport_error_t* error) {
  if (!TlsMayUse(kMmTransports, kMmAliases)) return RDV_TRANSPORT_OK;
  for (const char* name : {"UCX_MM_SEG_SIZE", "UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE"}) {
    const char* text = std::getenv(name);
    size_t bytes = 0;
    if (text == nullptr || ucs_str_to_memunits(text, &bytes) != UCS_OK || bytes < 65536) continue;
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "%s=%s: UCX's shared-memory transports hang with segments of 64 KiB or more "
                    "(their FIFO keeps lengths in 16 bits); use at most 60000 (rdv's default: "
                    "56K)",
                    name, text);
  }
  return RDV_TRANSPORT_OK;
}

}  // namespace rdv::ucx_plugin
