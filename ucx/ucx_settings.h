// What the UCX plugin decides from the environment (UCX_TLS, RDV_UCX_OP,
// UCX's segment sizes) before it starts UCX.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include <ucp/api/ucp.h>

#include "plugin/rdv_transport.h"

namespace rdv::ucx_plugin {

// RDV_TRANSPORT_OP_GET or _TAG into `op`, from RDV_UCX_OP or else UCX_TLS;
// false for an RDV_UCX_OP value it does not know.
bool ReadPreferredOp(uint32_t* op);
// Sets rdv's defaults on `config` where UCX_TLS lets UCX open a transport
// that reads them and the user set none; `warn` hears of one UCX refused.
// Returns what it changed, for the transport's description.
std::string ApplyTunedDefaults(ucp_config_t* config,
                               const std::function<void(const std::string&)>& warn);
// Refuses shared-memory segment sizes that hang UCX 1.13; 0 when all are safe.
int CheckSharedMemorySegments(rdv_transport_error_t* error);

}  // namespace rdv::ucx_plugin
