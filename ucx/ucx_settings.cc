// The UCX plugin's settings, and what rdv decides from UCX_TLS: gets or
// tagged sends, its tuned defaults, the segment sizes it refuses. UCX_* other
// than the tls are UCX's own variables, read by UCX (ucp_config_read); the
// plugin only looks whether the user set one.
#include "ucx/ucx_settings.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <ucs/sys/string.h>
#include <uct/api/uct.h>

#include "plugin/plugin_support.h"

namespace rdv::ucx_plugin {
namespace {

using rdv::plugin_support::PluginSettings;
using rdv::plugin_support::SetError;

const rdv_transport_setting_info_t kSettings[] = {
    {"tls", "UCX_TLS", "",
     "the UCX transports, as UCX_TLS takes them (default: UCX's choice); rdv's op and tuned "
     "defaults follow it"},
    {"op", "RDV_UCX_OP", "auto",
     "auto, get or tag: the consumer reads the producer's buffer (get) or the producer sends it "
     "tagged (tag); auto gets only over RC/DC"},
    {"progress", "RDV_UCX_PROGRESS", "wait",
     "wait or poll: the progress thread sleeps on the worker's event fd when idle, or spins"},
    {"spin_us", "RDV_UCX_SPIN_US", "1000",
     "with progress wait: microseconds the progress thread keeps polling (yielding the CPU "
     "between polls) after its last work before it sleeps, 0 to 10000"},
    {"memory", "RDV_UCX_MEMORY", "auto",
     "auto, anonymous or mapped: the memory rdv's pool takes from this transport; mapped is "
     "System V shared memory for tensors of 256 KiB and more, which a consumer on the same host "
     "attaches (read-only for a get), copies from at memory speed, and keeps attached "
     "(docs/security.md); auto is mapped where the tls names same-host transports only, and "
     "there the producer lends such tensors to be read instead of sending them"},
};

// UCX_TLS as UCX reads it: a list of transport names, or of names to
// leave out when it starts with '^'. No names: unset, every transport.
struct TlsSetting {
  bool excluding = false;
  std::vector<std::string> names;

  bool Names(const std::string& name) const {
    return std::find(names.begin(), names.end(), name) != names.end();
  }
};

TlsSetting ParseTls(const std::string& text) {
  TlsSetting setting;
  if (text.empty()) return setting;
  const char* tls = text.c_str();
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
bool TlsMayUse(const std::string& text, const std::vector<std::string>& members,
               const std::vector<std::string>& aliases) {
  const TlsSetting tls = ParseTls(text);
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

// Whether UCX_TLS names `members` (and self) and no other transport.
bool OnlyMembers(const TlsSetting& tls, const std::vector<std::string>& members) {
  if (tls.excluding || tls.names.empty()) return false;
  return std::all_of(tls.names.begin(), tls.names.end(), [&](const std::string& name) {
    return name == "self" || std::find(members.begin(), members.end(), name) != members.end();
  });
}

// Whether UCX_TLS names transports within one host only: shared memory,
// the kernel's and the devices' copies, and self.
bool OnlySharedMemory(const TlsSetting& tls) {
  return OnlyMembers(tls, {"posix", "sysv", "sm", "shm", "mm", "cma", "knem", "xpmem"});
}

// Whether every transport UCX finds on this host moves bytes over tcp or
// within the host: no RDMA or GPU device, whose traffic rdv's tcp tuning
// would slow.
bool UcxFindsOnlyTcpAndHostTransports() {
  uct_component_h* components = nullptr;
  unsigned count = 0;
  if (uct_query_components(&components, &count) != UCS_OK) return false;
  const std::vector<std::string> kTcpAndHost = {"self", "tcp",  "posix", "sysv",
                                                "cma",  "knem", "xpmem"};
  bool only = true;
  for (unsigned i = 0; i < count && only; ++i) {
    uct_component_attr_t attr{};
    attr.field_mask = UCT_COMPONENT_ATTR_FIELD_NAME | UCT_COMPONENT_ATTR_FIELD_MD_RESOURCE_COUNT;
    only = uct_component_query(components[i], &attr) == UCS_OK &&
           (attr.md_resource_count == 0 ||
            std::find(kTcpAndHost.begin(), kTcpAndHost.end(), attr.name) != kTcpAndHost.end());
  }
  uct_release_component_list(components);
  return only;
}

// Whether UCX carries everything between this worker's processes over tcp:
// UCX_TLS names nothing else (but self), or it leaves UCX every transport
// on a host where UCX finds no RDMA or GPU device. There, rdv's request for
// peer-failure handling keeps UCX off shared memory (docs/configuration.md).
bool TcpCarriesEverything(const UcxSettings& settings) {
  const TlsSetting tls = ParseTls(settings.tls);
  if (OnlyMembers(tls, {"tcp"})) return true;
  const bool every_transport = tls.names.empty() || (!tls.excluding && tls.Names("all"));
  return every_transport && settings.peer_failure_handling && UcxFindsOnlyTcpAndHostTransports();
}

// Whether UCX may open tcp, or a shared-memory transport that reads the
// segment size.
bool TlsMayUseTcp(const UcxSettings& settings) { return TlsMayUse(settings.tls, {"tcp"}, {}); }
bool TlsMayUseMm(const UcxSettings& settings) {
  return TlsMayUse(settings.tls, kMmTransports, kMmAliases);
}

// A UCX default rdv changes for its traffic, only where the user has set
// none of `user_variables` and `applies` holds: UCX will open a transport
// that reads it (UCX warns of a setting no interface takes), or, for a
// setting of UCP's own, which changes every transport, tcp carries
// everything. UCX takes it by `key`, the name within the transport's
// table; a prefixed name is not accepted. `applies` runs only where the
// user has set none.
struct TunedDefault {
  const char* shown;  // in the transport's description
  std::vector<const char*> user_variables;
  const char* key;
  const char* value;
  bool (*applies)(const UcxSettings& settings);
};

// Over tcp a rendezvous to a consumer (which has no endpoint of its own to
// the producer) arrives as active messages of up to the receive segment,
// each read and then copied: 64 KiB segments hold a 64 MiB transfer near
// 2 GB/s on loopback, 1 MiB ones match ucx_perftest's tag_bw.
// Over shared memory a get of memory UCX did not allocate travels as
// active messages of one segment each, copied in by the producer and out
// by the consumer: 8 KiB segments reach about 7 GB/s at 64 MiB, 56 KiB
// ones about 9.5 (the FIFO's length field is 16 bits: 64 KiB hangs).
// Over tcp alone, values under 1 MiB go eagerly: a recurring key's
// receive is posted before its request leaves, so an eager send saves
// the rendezvous' two extra one-way trips (64 KiB, pinned: p50 66 -> 47
// us; 512 KiB in torch's ping-pong: 170 -> 126 us). From 1 MiB up, eager
// loses for a first-time key, whose value arrives before its receive is
// posted and is copied once more.
// docs/configuration.md has all three.
const TunedDefault kTunedDefaults[] = {
    {"UCX_TCP_RX_SEG_SIZE", {"UCX_TCP_RX_SEG_SIZE"}, "RX_SEG_SIZE", "1M", TlsMayUseTcp},
    {"UCX_RNDV_THRESH", {"UCX_RNDV_THRESH"}, "RNDV_THRESH", "1M", TcpCarriesEverything},
    {"UCX_{POSIX,SYSV}_SEG_SIZE",
     {"UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_MM_SEG_SIZE"},
     "MM_SEG_SIZE",
     "56K",
     TlsMayUseMm},
};

}  // namespace

const rdv_transport_setting_info_t* SettingsTable(size_t* count) {
  return plugin_support::ListSettings(kSettings, count);
}

int ReadSettings(const rdv_transport_init_params_t* params, UcxSettings* settings,
                 rdv_transport_error_t* error) {
  PluginSettings given(kSettings, "ucx");
  int op = 0, progress = 0, memory = 0;
  long spin_us = 0;
  int code = RDV_TRANSPORT_OK;
  if ((code = given.Configure(params, error)) ||
      (code = given.Choice("op", {"auto", "get", "tag"}, &op, error)) ||
      (code = given.Choice("progress", {"wait", "poll"}, &progress, error)) ||
      (code = given.Integer("spin_us", 0, 10000, &spin_us, error)) ||
      (code = given.Choice("memory", {"auto", "anonymous", "mapped"}, &memory, error))) {
    return code;
  }
  settings->tls = given.Text("tls");
  settings->tls_given = given.Given("tls");
  settings->busy_poll = progress == 1;
  settings->spin = std::chrono::microseconds(spin_us);
  const bool same_host_only = OnlySharedMemory(ParseTls(settings->tls));
  settings->mapped_memory = memory == 2 || (memory == 0 && same_host_only);
  settings->segments_read_by_peer_copy = settings->mapped_memory && same_host_only;
  const bool get = op == 1 || (op == 0 && OnlyConfiningTransports(ParseTls(settings->tls)));
  settings->preferred_op = get ? RDV_TRANSPORT_OP_GET : RDV_TRANSPORT_OP_TAG;
  settings->peer_failure_handling = !same_host_only;
  return RDV_TRANSPORT_OK;
}

std::string ApplyToConfig(const UcxSettings& settings, ucp_config_t* config,
                          const std::function<void(const std::string&)>& warn) {
  if (settings.tls_given) {
    if (ucp_config_modify(config, "TLS", settings.tls.c_str()) != UCS_OK) {
      warn("tls '" + settings.tls + "' not applied: UCX refused it");
    }
  }
  if (settings.preferred_op == RDV_TRANSPORT_OP_GET && !settings.mapped_memory &&
      TlsMayUseMm(settings)) {
    warn("op get over shared memory with memory anonymous: the producer's progress thread "
         "serves each get, and a producer lost mid-get can leave later gets to this worker "
         "stalled (UCX 1.13; docs/robustness.md). memory=mapped (RDV_UCX_MEMORY) or op tag "
         "avoids it");
  }
  std::string applied;
  for (const TunedDefault& tuned : kTunedDefaults) {
    const bool user_set = std::any_of(tuned.user_variables.begin(), tuned.user_variables.end(),
                                      [](const char* name) { return std::getenv(name); });
    if (user_set || !tuned.applies(settings)) continue;
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
int CheckSharedMemorySegments(const UcxSettings& settings, rdv_transport_error_t* error) {
  if (!TlsMayUseMm(settings)) return RDV_TRANSPORT_OK;
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
