// The device, port and GID a context uses.
#include "verbs/verbs_context.h"

#include <arpa/inet.h>

#include <cstring>

#include "plugin/plugin_support.h"

namespace rdv::verbs {

using plugin_support::SetError;

int ErrnoError(rdv_transport_error_t* error, int code, const char* what, int err) {
  return SetError(error, code, "verbs: %s: %s", what, std::strerror(err));
}

bool IsIpv4Mapped(const ibv_gid& gid) {
  static const uint8_t kPrefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return std::memcmp(gid.raw, kPrefix, sizeof(kPrefix)) == 0;
}

std::string GidText(const ibv_gid& gid) {
  if (IsIpv4Mapped(gid)) {
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, gid.raw + 12, text, sizeof(text));
    return text;
  }
  char text[INET6_ADDRSTRLEN];
  inet_ntop(AF_INET6, gid.raw, text, sizeof(text));
  return text;
}
namespace {

// The GID to use on `port`: RDV_IB_GID_INDEX, else the RoCE v2 IPv4-mapped
// one (index 0 on InfiniBand).
int ChooseGid(Context* context, rdv_transport_error_t* error) {
  const int wanted = context->settings.gid_index;
  if (context->port_attr.link_layer != IBV_LINK_LAYER_ETHERNET && wanted < 0) {
    context->gid_index = 0;
    return ibv_query_gid(context->device, context->port, 0, &context->gid) == 0
               ? RDV_TRANSPORT_OK
               : SetError(error, RDV_TRANSPORT_INTERNAL, "verbs: cannot read GID 0");
  }
  for (int index = 0; index < context->port_attr.gid_tbl_len; ++index) {
    if (wanted >= 0 && index != wanted) continue;
    ibv_gid_entry entry{};
    if (ibv_query_gid_ex(context->device, context->port, index, &entry, 0) != 0) continue;
    ibv_gid gid;
    std::memcpy(gid.raw, entry.gid.raw, sizeof(gid.raw));
    if (wanted >= 0 || (entry.gid_type == IBV_GID_TYPE_ROCE_V2 && IsIpv4Mapped(gid))) {
      context->gid_index = index;
      context->gid = gid;
      return RDV_TRANSPORT_OK;
    }
  }
  return SetError(error, RDV_TRANSPORT_FAILED_PRECONDITION,
                  wanted >= 0 ? "verbs: port %d has no usable GID at RDV_IB_GID_INDEX=%d"
                              : "verbs: port %d has no RoCE v2 IPv4 GID (%d); give the netdev an "
                                "IPv4 address or set RDV_IB_GID_INDEX",
                  context->port, wanted);
}

}  // namespace

// Opens RDV_IB_DEVICE (or the first device with an active port) and picks
// the port.
int OpenDevice(Context* context, rdv_transport_error_t* error) {
  int count = 0;
  ibv_device** devices = ibv_get_device_list(&count);
  if (devices == nullptr || count == 0) {
    if (devices != nullptr) ibv_free_device_list(devices);
    return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                    "verbs: no RDMA device (ibv_get_device_list found none; is rdma_rxe or a "
                    "NIC driver loaded, and /dev/infiniband visible?)");
  }
  const Settings& settings = context->settings;
  std::string looked;
  for (int i = 0; i < count && context->device == nullptr; ++i) {
    const char* name = ibv_get_device_name(devices[i]);
    if (!settings.device.empty() && settings.device != name) continue;
    ibv_context* device = ibv_open_device(devices[i]);
    if (device == nullptr) continue;
    ibv_device_attr attr{};
    ibv_query_device(device, &attr);
    for (int port = 1; port <= attr.phys_port_cnt; ++port) {
      if (settings.port != 0 && port != settings.port) continue;
      ibv_port_attr port_attr{};
      if (ibv_query_port(device, static_cast<uint8_t>(port), &port_attr) != 0) continue;
      looked += std::string(looked.empty() ? "" : ", ") + name + ":" + std::to_string(port) +
                " " + ibv_port_state_str(port_attr.state);
      if (port_attr.state != IBV_PORT_ACTIVE) continue;
      context->device = device;
      context->device_attr = attr;
      context->port = static_cast<uint8_t>(port);
      context->port_attr = port_attr;
      break;
    }
    if (context->device == nullptr) ibv_close_device(device);
  }
  ibv_free_device_list(devices);
  if (context->device == nullptr) {
    return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                    "verbs: no active port%s%s%s (seen: %s)",
                    settings.device.empty() ? "" : " on RDV_IB_DEVICE=",
                    settings.device.c_str(), settings.port ? " at RDV_IB_PORT" : "",
                    looked.empty() ? "nothing" : looked.c_str());
  }
  return ChooseGid(context, error);
}

}  // namespace rdv::verbs
