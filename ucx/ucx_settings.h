// The UCX plugin's settings (the ABI's `settings`: tls, op, progress) and
// what it decides from them before it starts UCX: gets or tagged sends, its
// tuned defaults, the segment sizes it refuses.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include <ucp/api/ucp.h>

#include "plugin/rdv_transport.h"

namespace rdv::ucx_plugin {

// The table the ABI's `settings` returns.
const rdv_transport_setting_info_t* SettingsTable(size_t* count);

struct UcxSettings {
  std::string tls;      // as UCX_TLS; empty: UCX's choice
  bool tls_given = false;
  uint32_t preferred_op = RDV_TRANSPORT_OP_GET;
  bool busy_poll = false;
  // With wait: how long the progress thread polls after its last work.
  std::chrono::microseconds spin{0};
  // The pool's tensors of kMinSegmentBytes and more are System V segments
  // (ucx_shared_memory.h), not anonymous memory.
  bool mapped_memory = false;
  // Every peer is on this host (the tls names same-host transports only),
  // so it reads those segments through an attachment of its own: a get of
  // one is a copy the reader makes (mem_query's read_by_peer_copy).
  bool segments_read_by_peer_copy = false;
  // False when the tls names only shared-memory transports, which cannot
  // report a lost peer in UCX 1.13: endpoints then ask for no peer-failure
  // handling (asking first makes UCX log an error per endpoint).
  bool peer_failure_handling = true;
};

// Reads init's settings; INVALID_ARGUMENT naming a setting it cannot take.
int ReadSettings(const rdv_transport_init_params_t* params, UcxSettings* settings,
                 rdv_transport_error_t* error);
// Sets the given tls and rdv's defaults on `config` (the latter only where
// the tls lets UCX open a transport that reads them and the user set none);
// `warn` hears of one UCX refused. Returns what it changed, for the
// transport's description.
std::string ApplyToConfig(const UcxSettings& settings, ucp_config_t* config,
                          const std::function<void(const std::string&)>& warn);
// Refuses shared-memory segment sizes that hang UCX 1.13; 0 when all are safe.
int CheckSharedMemorySegments(const UcxSettings& settings, rdv_transport_error_t* error);

}  // namespace rdv::ucx_plugin
