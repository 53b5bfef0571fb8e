// The verbs plugin's settings (the ABI's `settings`), filled by the host
// from RDV_IB_* (docs/configuration.md).
#include "verbs/verbs_context.h"

#include "plugin/plugin_support.h"

namespace rdv::verbs {
namespace {

using plugin_support::PluginSettings;

const rdv_transport_setting_info_t kSettings[] = {
    {"device", "RDV_IB_DEVICE", "",
     "the RDMA device, as ibv_devices names it (default: the first with an active port)"},
    {"port", "RDV_IB_PORT", "0", "the port on that device, 1 to 255 (0: the first active one)"},
    {"gid_index", "RDV_IB_GID_INDEX", "-1",
     "the GID the queue pairs are addressed by (-1: the port's RoCE v2 IPv4-mapped GID)"},
    {"connect_address", "RDV_IB_CONNECT_ADDRESS", "",
     "the IPv4 address where peers reach this context's queue-pair listener (default: the "
     "GID's)"},
    {"qp_timeout", "RDV_IB_QP_TIMEOUT", "14",
     "the RC local ACK timeout exponent, 1 to 31: 4.096 us x 2^value per try"},
    {"retry_count", "RDV_IB_RETRY_COUNT", "7",
     "retries of an unacknowledged packet, 0 to 7, before a transfer fails UNAVAILABLE"},
    {"queue_depth", "RDV_IB_QUEUE_DEPTH", "128", "work requests in flight per queue pair"},
    {"chunk_bytes", "RDV_IB_CHUNK_BYTES", "1048576",
     "bytes per RDMA READ/WRITE work request, 4096 to 2^30"},
    {"progress", "RDV_IB_PROGRESS", "wait",
     "wait or poll: the progress thread sleeps on the completion channel, or spins ('event' "
     "means wait)"},
    {"spin_us", "RDV_IB_SPIN_US", "1000",
     "with progress wait: microseconds the progress thread keeps polling (yielding the CPU "
     "between polls) after its last work before it sleeps, 0 to 10000"},
};

}  // namespace

const rdv_transport_setting_info_t* SettingsTable(size_t* count) {
  return plugin_support::ListSettings(kSettings, count);
}

int ReadSettings(const rdv_transport_init_params_t* params, Settings* settings,
                 rdv_transport_error_t* error) {
  PluginSettings given(kSettings, "verbs");
  long port = 0, gid = 0, timeout = 0, retry = 0, depth = 0, chunk = 0, spin_us = 0;
  int progress = 0;
  int code = RDV_TRANSPORT_OK;
  if ((code = given.Configure(params, error)) ||
      (code = given.Integer("port", 0, 255, &port, error)) ||
      (code = given.Integer("gid_index", -1, 1 << 16, &gid, error)) ||
      (code = given.Integer("qp_timeout", 1, 31, &timeout, error)) ||
      (code = given.Integer("retry_count", 0, 7, &retry, error)) ||
      (code = given.Integer("queue_depth", 1, 16384, &depth, error)) ||
      (code = given.Integer("chunk_bytes", 4096, 1l << 30, &chunk, error)) ||
      (code = given.Choice("progress", {"wait", "poll", "event"}, &progress, error)) ||
      (code = given.Integer("spin_us", 0, 10000, &spin_us, error))) {
    return code;
  }
  settings->device = given.Text("device");
  settings->connect_address = given.Text("connect_address");
  settings->port = static_cast<int>(port);
  settings->gid_index = static_cast<int>(gid);
  settings->qp_timeout = static_cast<int>(timeout);
  settings->retry_count = static_cast<int>(retry);
  settings->queue_depth = static_cast<int>(depth);
  settings->chunk_bytes = static_cast<size_t>(chunk);
  settings->busy_poll = progress == 1;
  settings->spin = std::chrono::microseconds(spin_us);
  return RDV_TRANSPORT_OK;
}

}  // namespace rdv::verbs
