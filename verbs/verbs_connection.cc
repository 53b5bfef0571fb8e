// Queue pairs and their connection: each side swaps QP info over a TCP
// connection that stays open for the QP's life.
#include "verbs/verbs_context.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "plugin/plugin_support.h"

namespace rdv::verbs {

using plugin_support::SetError;

ibv_qp* CreateQp(Context* context) {
  ibv_qp_init_attr init{};
  init.send_cq = context->cq;
  init.recv_cq = context->cq;
  init.srq = context->srq;  // messages arrive here; null when not offered
  init.qp_type = IBV_QPT_RC;
  init.cap.max_send_wr = static_cast<uint32_t>(context->settings.queue_depth);
  init.cap.max_recv_wr = 1;
  init.cap.max_send_sge = 1;
  init.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(context->pd, &init);
  if (qp == nullptr) return nullptr;
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_INIT;
  attr.pkey_index = 0;
  attr.port_num = context->port;
  attr.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &attr,
                    IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0) {
    ibv_destroy_qp(qp);
    return nullptr;
  }
  return qp;
}

QpInfo LocalInfo(Context* context, ibv_qp* qp, uint32_t psn) {
  QpInfo info{};
  info.magic = kQpInfoMagic;
  info.qpn = qp->qp_num;
  info.psn = psn;
  info.lid = context->port_attr.lid;
  info.mtu = static_cast<uint8_t>(context->port_attr.active_mtu);
  std::memcpy(info.gid, context->gid.raw, sizeof(info.gid));
  return info;
}

// INIT -> RTR -> RTS against the peer's QP.
int ConnectQp(Context* context, ibv_qp* qp, uint32_t local_psn, const QpInfo& peer,
              rdv_transport_error_t* error) {
  const int reads = std::max(1, std::min({kMaxReadsInFlight, context->device_attr.max_qp_rd_atom,
                                          context->device_attr.max_qp_init_rd_atom}));
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_RTR;
  attr.path_mtu = static_cast<ibv_mtu>(std::min<int>(peer.mtu, context->port_attr.active_mtu));
  attr.dest_qp_num = peer.qpn;
  attr.rq_psn = peer.psn;
  attr.max_dest_rd_atomic = static_cast<uint8_t>(reads);
  attr.min_rnr_timer = 12;
  attr.ah_attr.dlid = peer.lid;
  attr.ah_attr.port_num = context->port;
  if (context->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
    attr.ah_attr.is_global = 1;
    std::memcpy(attr.ah_attr.grh.dgid.raw, peer.gid, sizeof(peer.gid));
    attr.ah_attr.grh.sgid_index = static_cast<uint8_t>(context->gid_index);
    attr.ah_attr.grh.hop_limit = 64;
  }
  if (int err = ibv_modify_qp(qp, &attr,
                              IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER)) {
    return ErrnoError(error, RDV_TRANSPORT_UNAVAILABLE, "queue pair to RTR", err);
  }
  attr = {};
  attr.qp_state = IBV_QPS_RTS;
  attr.timeout = static_cast<uint8_t>(context->settings.qp_timeout);
  attr.retry_cnt = static_cast<uint8_t>(context->settings.retry_count);
  attr.rnr_retry = 7;
  attr.sq_psn = local_psn;
  attr.max_rd_atomic = static_cast<uint8_t>(reads);
  if (int err = ibv_modify_qp(qp, &attr,
                              IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    return ErrnoError(error, RDV_TRANSPORT_UNAVAILABLE, "queue pair to RTS", err);
  }
  return RDV_TRANSPORT_OK;
}

namespace {

void SetSocketTimeouts(int socket) {
  const timeval timeout{kExchangeTimeoutMs / 1000, (kExchangeTimeoutMs % 1000) * 1000};
  setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  const int one = 1;
  setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

bool SendAll(int socket, const void* data, size_t size) {
  return send(socket, data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

bool ReceiveInfo(int socket, QpInfo* info) {
  return recv(socket, info, sizeof(*info), MSG_WAITALL) == static_cast<ssize_t>(sizeof(*info)) &&
         info->magic == kQpInfoMagic;
}

// Connects to the peer's listener, bounded by kExchangeTimeoutMs.
int DialPeer(const WireAddress& peer, int* out, rdv_transport_error_t* error) {
  char host[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &peer.ipv4, host, sizeof(host));
  const int socket_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (socket_fd < 0) return ErrnoError(error, RDV_TRANSPORT_INTERNAL, "socket", errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = peer.ipv4;
  address.sin_port = peer.tcp_port;
  int err = 0;
  if (connect(socket_fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    err = errno;
    if (err == EINPROGRESS) {
      pollfd ready{socket_fd, POLLOUT, 0};
      socklen_t size = sizeof(err);
      err = poll(&ready, 1, kExchangeTimeoutMs) == 1 &&
                    getsockopt(socket_fd, SOL_SOCKET, SO_ERROR, &err, &size) == 0
                ? err
                : ETIMEDOUT;
    }
  }
  if (err != 0) {
    close(socket_fd);
    return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                    "verbs: cannot reach the peer's connection listener at %s:%u: %s", host,
                    ntohs(peer.tcp_port), std::strerror(err));
  }
  fcntl(socket_fd, F_SETFL, fcntl(socket_fd, F_GETFL) & ~O_NONBLOCK);
  SetSocketTimeouts(socket_fd);
  *out = socket_fd;
  return RDV_TRANSPORT_OK;
}

namespace {

void Forget(Context* context, int socket_fd) {
  ibv_qp* qp = nullptr;
  {
    std::lock_guard lock(context->accepted_mu);
    auto it = context->accepted.find(socket_fd);
    if (it == context->accepted.end()) return;
    qp = it->second.qp;
    context->accepted.erase(it);
  }
  if (qp != nullptr) ibv_destroy_qp(qp);
  close(socket_fd);
}

// A peer connects to us: answer its QP info with a QP of ours.
void Accept(Context* context) {
  const int socket_fd = accept4(context->listener, nullptr, nullptr, SOCK_CLOEXEC);
  if (socket_fd < 0) return;
  SetSocketTimeouts(socket_fd);
  QpInfo peer{};
  ibv_qp* qp = nullptr;
  const uint32_t psn = context->NewPsn();
  rdv_transport_error_t error{};
  if (!ReceiveInfo(socket_fd, &peer) || (qp = CreateQp(context)) == nullptr ||
      ConnectQp(context, qp, psn, peer, &error) != RDV_TRANSPORT_OK) {
    context->log(1, std::string("refused a peer's connection: ") +
                        (error.message[0] ? error.message : "bad QP info or no QP"));
    if (qp != nullptr) ibv_destroy_qp(qp);
    close(socket_fd);
    return;
  }
  const QpInfo local = LocalInfo(context, qp, psn);
  {
    std::lock_guard lock(context->accepted_mu);
    context->accepted[socket_fd] = Accepted{qp};
  }
  if (!SendAll(socket_fd, &local, sizeof(local))) Forget(context, socket_fd);
}

}  // namespace

void AcceptLoop(Context* context) {
  while (!context->stop.load()) {
    std::vector<pollfd> fds = {{context->wake, POLLIN, 0}, {context->listener, POLLIN, 0}};
    {
      std::lock_guard lock(context->accepted_mu);
      for (const auto& [socket_fd, accepted] : context->accepted) {
        fds.push_back({socket_fd, POLLIN, 0});
      }
    }
    if (poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[0].revents != 0) break;
    if (fds[1].revents & POLLIN) Accept(context);
    for (size_t i = 2; i < fds.size(); ++i) {
      // The peer only ever closes its end: any readiness means it is gone.
      if (fds[i].revents != 0) Forget(context, fds[i].fd);
    }
  }
}

int StartListener(Context* context, rdv_transport_error_t* error) {
  context->listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (context->listener < 0) return ErrnoError(error, RDV_TRANSPORT_INTERNAL, "socket", errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t size = sizeof(address);
  if (bind(context->listener, reinterpret_cast<sockaddr*>(&address), size) != 0 ||
      listen(context->listener, 128) != 0 ||
      getsockname(context->listener, reinterpret_cast<sockaddr*>(&address), &size) != 0) {
    return ErrnoError(error, RDV_TRANSPORT_UNAVAILABLE, "connection listener", errno);
  }
  WireAddress& wire = context->address;
  wire.magic = kAddressMagic;
  wire.version = kAddressVersion;
  wire.lid = context->port_attr.lid;
  std::memcpy(wire.gid, context->gid.raw, sizeof(wire.gid));
  wire.tcp_port = address.sin_port;
  wire.link_layer = context->port_attr.link_layer;
  wire.mtu = static_cast<uint8_t>(context->port_attr.active_mtu);
  // An explicit address wins: a container whose device lives in the host's
  // network namespace is reached at its own address, not at the GID's.
  if (const std::string& host = context->settings.connect_address; !host.empty()) {
    if (inet_pton(AF_INET, host.c_str(), &wire.ipv4) != 1) {
      return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                      "verbs: connect_address (RDV_IB_CONNECT_ADDRESS)='%s' is not an IPv4 "
                      "address",
                      host.c_str());
    }
  } else if (IsIpv4Mapped(context->gid)) {
    std::memcpy(&wire.ipv4, context->gid.raw + 12, sizeof(wire.ipv4));
  } else {
    return SetError(error, RDV_TRANSPORT_FAILED_PRECONDITION,
                    "verbs: GID %s carries no IPv4 address for peers to connect to; set "
                    "connect_address (RDV_IB_CONNECT_ADDRESS) to this host's IPv4 address",
                    GidText(context->gid).c_str());
  }
  return RDV_TRANSPORT_OK;
}

}  // namespace rdv::verbs
