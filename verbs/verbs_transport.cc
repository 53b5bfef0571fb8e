// librdv_transport_verbs.so: rdv's transport ABI (plugin/rdv_transport.h) on
// libibverbs, with no UCX in between.
//
// One context = one device port, one protection domain, one completion
// queue, a progress thread that sleeps on the completion channel
// (RDV_IB_PROGRESS=poll keeps it spinning), and a connection listener.
// connect() makes one RC queue pair to the peer: the two sides swap QPN,
// PSN, LID and GID over a TCP connection to the address in the peer's blob
// (perftest does the same), and that connection stays open for the QP's
// life, so a peer that goes away frees the QP it served. Transfers are RDMA
// READ (get) or WRITE (put), cut into RDV_IB_CHUNK_BYTES work requests with
// up to RDV_IB_QUEUE_DEPTH in flight per QP; the rest wait in order.
//
// A completion error fails its transfer with the ibv_wc_status string and
// puts the QP out of service: later posts on that endpoint fail at once
// with UNAVAILABLE, and rdv makes a new endpoint (a new QP) for the next
// transfer. Nothing here aborts the process.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"

namespace {

using rdv::plugin_support::CopyOut;
using rdv::plugin_support::Seal;
using rdv::plugin_support::SetError;
using rdv::plugin_support::Unseal;

constexpr int kExchangeTimeoutMs = 5000;  // TCP connect and QP info swap
constexpr int kMaxReadsInFlight = 16;     // per QP, clamped to the device's limit

// Settings from RDV_IB_* (docs/configuration.md).
struct Settings {
  std::string device;        // RDV_IB_DEVICE; empty: the first with an active port
  int port = 0;              // RDV_IB_PORT; 0: the first active port
  int gid_index = -1;        // RDV_IB_GID_INDEX; -1: the port's RoCE v2 IPv4 GID
  int qp_timeout = 14;       // RDV_IB_QP_TIMEOUT: 4.096 us * 2^14 = 67 ms per try
  int retry_count = 7;       // RDV_IB_RETRY_COUNT
  int queue_depth = 128;     // RDV_IB_QUEUE_DEPTH: work requests in flight per QP
  size_t chunk_bytes = size_t{1} << 20;  // RDV_IB_CHUNK_BYTES
  bool busy_poll = false;    // RDV_IB_PROGRESS=poll
};

int ReadIntSetting(const char* name, long low, long high, long* value,
                   rdv_transport_error_t* error) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return RDV_TRANSPORT_OK;
  char* end = nullptr;
  errno = 0;
  const long parsed = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || parsed < low || parsed > high) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "%s='%s': expected an integer in [%ld, %ld]", name, text, low, high);
  }
  *value = parsed;
  return RDV_TRANSPORT_OK;
}

int ReadSettings(Settings* settings, rdv_transport_error_t* error) {
  if (const char* device = std::getenv("RDV_IB_DEVICE")) settings->device = device;
  long port = settings->port, gid = settings->gid_index, timeout = settings->qp_timeout,
       retry = settings->retry_count, depth = settings->queue_depth,
       chunk = static_cast<long>(settings->chunk_bytes);
  int code = RDV_TRANSPORT_OK;
  if ((code = ReadIntSetting("RDV_IB_PORT", 1, 255, &port, error)) ||
      (code = ReadIntSetting("RDV_IB_GID_INDEX", 0, 1 << 16, &gid, error)) ||
      (code = ReadIntSetting("RDV_IB_QP_TIMEOUT", 1, 31, &timeout, error)) ||
      (code = ReadIntSetting("RDV_IB_RETRY_COUNT", 0, 7, &retry, error)) ||
      (code = ReadIntSetting("RDV_IB_QUEUE_DEPTH", 1, 16384, &depth, error)) ||
      (code = ReadIntSetting("RDV_IB_CHUNK_BYTES", 4096, 1l << 30, &chunk, error))) {
    return code;
  }
  const char* progress = std::getenv("RDV_IB_PROGRESS");
  if (progress != nullptr && std::strcmp(progress, "poll") != 0 &&
      std::strcmp(progress, "event") != 0 && *progress != '\0') {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "RDV_IB_PROGRESS='%s': expected 'event' or 'poll'", progress);
  }
  settings->busy_poll = progress != nullptr && std::strcmp(progress, "poll") == 0;
  settings->port = static_cast<int>(port);
  settings->gid_index = static_cast<int>(gid);
  settings->qp_timeout = static_cast<int>(timeout);
  settings->retry_count = static_cast<int>(retry);
  settings->queue_depth = static_cast<int>(depth);
  settings->chunk_bytes = static_cast<size_t>(chunk);
  return RDV_TRANSPORT_OK;
}

// The address blob peers get: where the port is and where to swap QP info.
struct WireAddress {
  uint32_t magic;
  uint16_t version;
  uint16_t lid;
  uint8_t gid[16];
  uint32_t ipv4;      // network order
  uint16_t tcp_port;  // network order
  uint8_t link_layer;
  uint8_t mtu;        // enum ibv_mtu
};
constexpr uint32_t kAddressMagic = 0x56564452;  // "RDVV"
constexpr uint16_t kAddressVersion = 1;

// What the two sides of a new QP tell each other.
struct QpInfo {
  uint32_t magic;
  uint32_t qpn;
  uint32_t psn;
  uint16_t lid;
  uint8_t mtu;
  uint8_t pad;
  uint8_t gid[16];
};
constexpr uint32_t kQpInfoMagic = 0x51564452;  // "RDVQ"

// How GPU memory reaches the NIC, chosen once per context the way NCCL's
// IB plugin does: dma-buf when the driver, the kernel and the provider
// support it, else nvidia-peermem when it is loaded, else not at all (rdv
// then stages GPU tensors through host memory).
enum class GpuPath { kNone, kDmaBuf, kPeerMem };

struct Context;
struct Endpoint;

// One posted transfer; freed after its callback has run.
struct Operation {
  Endpoint* endpoint;
  rdv_transport_completion_fn done;
  void* user;
  ibv_wr_opcode opcode;
  char* local;
  uint32_t lkey;
  uint64_t remote;
  uint32_t rkey;
  size_t length;
  size_t posted = 0;    // bytes handed to the QP
  int outstanding = 0;  // work requests not completed yet
  bool queued = true;   // still in its endpoint's `waiting`
  int code = RDV_TRANSPORT_OK;
  std::string message;
};

struct Endpoint {
  Context* context = nullptr;
  ibv_qp* qp = nullptr;
  int socket = -1;  // closing it tells the peer to free its side
  std::mutex mu;
  int credits = 0;                  // free send queue slots; mu
  std::deque<Operation*> waiting;   // not fully posted yet, in order; mu
  std::string broken;               // why the QP is out of service; mu
  bool closing = false;             // disconnect() was called; mu
  bool aborted = false;             // abort() was called; mu
  // What ends now ends at rdv's request: CANCELLED rather than UNAVAILABLE.
  bool cancelling() const { return closing || aborted; }
};

// The passive side of a peer's QP, kept while the peer's socket is open.
struct Accepted {
  ibv_qp* qp;
};

struct Memory {
  Context* context = nullptr;
  ibv_mr* mr = nullptr;
  void* owned = nullptr;  // mem_alloc's memory
};

struct Context {
  Settings settings;
  ibv_context* device = nullptr;
  ibv_pd* pd = nullptr;
  ibv_comp_channel* channel = nullptr;
  ibv_cq* cq = nullptr;
  ibv_port_attr port_attr{};
  ibv_device_attr device_attr{};
  ibv_gid gid{};
  uint8_t port = 0;
  int gid_index = 0;
  std::string description;
  WireAddress address{};
  GpuPath gpu_path = GpuPath::kNone;

  int listener = -1;
  int wake = -1;  // eventfd: stops the threads
  int kick = -1;  // eventfd: `deferred` has operations
  std::mutex deferred_mu;
  std::vector<Operation*> deferred;  // over, to report on the progress thread; deferred_mu
  std::atomic<bool> has_deferred{false};
  std::atomic<bool> stop{false};
  std::thread progress;
  std::thread acceptor;
  std::mutex accepted_mu;
  std::unordered_map<int, Accepted> accepted;  // by socket; accepted_mu

  std::mutex endpoints_mu;
  std::condition_variable endpoints_gone;
  int live_endpoints = 0;  // endpoints_mu

  std::mt19937 random{std::random_device{}()};
  std::mutex random_mu;

  rdv_transport_log_fn log = nullptr;
  void* log_user = nullptr;
  int log_level = 1;

  void Log(int level, const std::string& message) const {
    if (log != nullptr && level <= log_level) log(log_user, level, message.c_str());
  }
  uint32_t NewPsn() {
    std::lock_guard lock(random_mu);
    return random() & 0xffffff;
  }
};

Context* ContextOf(rdv_transport_context_t handle) { return reinterpret_cast<Context*>(handle); }

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

// --------------------------------------------------------------- GPU memory

// The CUDA driver, opened at run time so that the plugin neither needs the
// CUDA toolkit to build nor a GPU to load. Only what registration needs.
struct CudaDriver {
  using Result = int;  // CUresult; 0 is CUDA_SUCCESS
  using DevicePtr = unsigned long long;
  static constexpr int kDmaBufFd = 1;            // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD
  static constexpr int kDmaBufSupported = 124;   // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED

  Result (*init)(unsigned) = nullptr;
  Result (*device_get)(int*, int) = nullptr;
  Result (*device_attribute)(int*, int, int) = nullptr;
  Result (*primary_retain)(void**, int) = nullptr;
  Result (*push)(void*) = nullptr;
  Result (*pop)(void**) = nullptr;
  Result (*address_range)(DevicePtr*, size_t*, DevicePtr) = nullptr;
  Result (*handle_for_range)(void*, DevicePtr, size_t, int, unsigned long long) = nullptr;

  // Null when there is no driver (or no GPU).
  static const CudaDriver* Get() {
    static const CudaDriver* driver = Open();
    return driver;
  }

 private:
  static const CudaDriver* Open() {
    void* library = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) return nullptr;
    auto* driver = new CudaDriver;
    auto bind = [library](auto* function, const char* name) {
      *function = reinterpret_cast<std::remove_pointer_t<decltype(function)>>(dlsym(library, name));
      return *function != nullptr;
    };
    const bool complete = bind(&driver->init, "cuInit") &&
                          bind(&driver->device_get, "cuDeviceGet") &&
                          bind(&driver->device_attribute, "cuDeviceGetAttribute") &&
                          bind(&driver->primary_retain, "cuDevicePrimaryCtxRetain") &&
                          bind(&driver->push, "cuCtxPushCurrent_v2") &&
                          bind(&driver->pop, "cuCtxPopCurrent_v2") &&
                          bind(&driver->address_range, "cuMemGetAddressRange_v2");
    bind(&driver->handle_for_range, "cuMemGetHandleForAddressRange");  // CUDA >= 11.7
    if (!complete || driver->init(0) != 0) {
      delete driver;
      return nullptr;
    }
    return driver;
  }
};


const char* GpuPathName(GpuPath path) {
  switch (path) {
    case GpuPath::kDmaBuf: return "dma-buf";
    case GpuPath::kPeerMem: return "nvidia-peermem";
    default: return "none";
  }
}

bool PeerMemLoaded() {
  return access("/sys/kernel/mm/memory_peers/nv_mem/version", F_OK) == 0 ||
         access("/sys/module/nvidia_peermem/version", F_OK) == 0;
}

GpuPath ChooseGpuPath(ibv_pd* pd, std::string* why) {
  const CudaDriver* cuda = CudaDriver::Get();
  if (cuda == nullptr) {
    *why = "no CUDA driver or GPU";
    return GpuPath::kNone;
  }
  int device = 0;
  int dma_buf = 0;
  if (cuda->handle_for_range != nullptr && cuda->device_get(&device, 0) == 0 &&
      cuda->device_attribute(&dma_buf, CudaDriver::kDmaBufSupported, device) == 0 && dma_buf) {
    // A registration of fd -1 fails with EBADF where dma-buf works, and
    // with EOPNOTSUPP / EPROTONOSUPPORT where the kernel or provider lacks it.
    errno = 0;
    ibv_mr* probe = ibv_reg_dmabuf_mr(pd, 0, 0, 0, -1, 0);
    if (probe != nullptr) ibv_dereg_mr(probe);
    if (errno != EOPNOTSUPP && errno != EPROTONOSUPPORT) {
      *why = "the driver, kernel and provider support dma-buf";
      return GpuPath::kDmaBuf;
    }
  }
  if (PeerMemLoaded()) {
    *why = "nvidia-peermem is loaded (no dma-buf)";
    return GpuPath::kPeerMem;
  }
  *why = "neither dma-buf support nor nvidia-peermem";
  return GpuPath::kNone;
}

// ------------------------------------------------------------------ device

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

// ------------------------------------------------------------ queue pairs

ibv_qp* CreateQp(Context* context) {
  ibv_qp_init_attr init{};
  init.send_cq = context->cq;
  init.recv_cq = context->cq;
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

void SetSocketTimeouts(int socket) {
  const timeval timeout{kExchangeTimeoutMs / 1000, (kExchangeTimeoutMs % 1000) * 1000};
  setsockopt(socket, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  setsockopt(socket, SOL_SOCKET, SO_SNDTIMEO, &timeout, sizeof(timeout));
  const int one = 1;
  setsockopt(socket, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

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

// ------------------------------------------------------------- acceptor

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
    context->Log(1, std::string("refused a peer's connection: ") +
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
  if (const char* host = std::getenv("RDV_IB_CONNECT_ADDRESS"); host != nullptr) {
    if (inet_pton(AF_INET, host, &wire.ipv4) != 1) {
      return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                      "verbs: RDV_IB_CONNECT_ADDRESS='%s' is not an IPv4 address", host);
    }
  } else if (IsIpv4Mapped(context->gid)) {
    std::memcpy(&wire.ipv4, context->gid.raw + 12, sizeof(wire.ipv4));
  } else {
    return SetError(error, RDV_TRANSPORT_FAILED_PRECONDITION,
                    "verbs: GID %s carries no IPv4 address for peers to connect to; set "
                    "RDV_IB_CONNECT_ADDRESS to this host's IPv4 address",
                    GidText(context->gid).c_str());
  }
  return RDV_TRANSPORT_OK;
}

// ------------------------------------------------------------- transfers

const char* CompletionCodeName(int code) {
  return code == RDV_TRANSPORT_CANCELLED ? "cancelled" : "failed";
}

int CodeOfCompletion(ibv_wc_status status, bool closing) {
  switch (status) {
    case IBV_WC_WR_FLUSH_ERR:
      return closing ? RDV_TRANSPORT_CANCELLED : RDV_TRANSPORT_UNAVAILABLE;
    case IBV_WC_RETRY_EXC_ERR:
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return RDV_TRANSPORT_UNAVAILABLE;
    case IBV_WC_REM_ACCESS_ERR:
    case IBV_WC_LOC_PROT_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
      return RDV_TRANSPORT_INVALID_ARGUMENT;
    default:
      return RDV_TRANSPORT_INTERNAL;
  }
}

void Fail(Operation* op, int code, std::string message) {
  if (op->code != RDV_TRANSPORT_OK) return;
  op->code = code;
  op->message = std::move(message);
}

// Posts what the QP has room for; returns operations that are over.
// Caller holds endpoint->mu.
void PumpLocked(Endpoint* endpoint, std::vector<Operation*>* over) {
  const size_t chunk = endpoint->context->settings.chunk_bytes;
  while (!endpoint->waiting.empty() && (endpoint->credits > 0 || !endpoint->broken.empty())) {
    Operation* op = endpoint->waiting.front();
    if (!endpoint->broken.empty()) {
      Fail(op, endpoint->cancelling() ? RDV_TRANSPORT_CANCELLED : RDV_TRANSPORT_UNAVAILABLE,
           "verbs: the queue pair is out of service: " + endpoint->broken);
    } else {
      const size_t length = std::min(chunk, op->length - op->posted);
      ibv_sge sge{reinterpret_cast<uint64_t>(op->local + op->posted),
                  static_cast<uint32_t>(length), op->lkey};
      ibv_send_wr wr{};
      ibv_send_wr* bad = nullptr;
      wr.wr_id = reinterpret_cast<uint64_t>(op);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      wr.opcode = op->opcode;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.wr.rdma.remote_addr = op->remote + op->posted;
      wr.wr.rdma.rkey = op->rkey;
      if (int err = ibv_post_send(endpoint->qp, &wr, &bad)) {
        endpoint->broken = std::string("ibv_post_send: ") + std::strerror(err);
        Fail(op, RDV_TRANSPORT_UNAVAILABLE, "verbs: " + endpoint->broken);
      } else {
        op->posted += length;
        ++op->outstanding;
        --endpoint->credits;
      }
    }
    if (op->posted == op->length || op->code != RDV_TRANSPORT_OK) {
      endpoint->waiting.pop_front();
      op->queued = false;
      if (op->outstanding == 0) over->push_back(op);
    }
  }
}

void DestroyEndpoint(Endpoint* endpoint) {
  Context* context = endpoint->context;
  ibv_destroy_qp(endpoint->qp);
  if (endpoint->socket >= 0) close(endpoint->socket);
  delete endpoint;
  std::lock_guard lock(context->endpoints_mu);
  if (--context->live_endpoints == 0) context->endpoints_gone.notify_all();
}

bool IdleAndClosing(Endpoint* endpoint) {
  return endpoint->closing && endpoint->waiting.empty() &&
         endpoint->credits == endpoint->context->settings.queue_depth;
}

void CompleteAll(const std::vector<Operation*>& over) {
  for (Operation* op : over) {
    op->done(op->user, op->code, op->code == RDV_TRANSPORT_OK ? nullptr : op->message.c_str());
    delete op;
  }
}

void OnCompletion(const ibv_wc& wc) {
  auto* op = reinterpret_cast<Operation*>(wc.wr_id);
  Endpoint* endpoint = op->endpoint;
  std::vector<Operation*> over;
  bool destroy = false;
  {
    std::lock_guard lock(endpoint->mu);
    ++endpoint->credits;
    --op->outstanding;
    if (wc.status != IBV_WC_SUCCESS) {
      const bool first = endpoint->broken.empty();
      if (first) {
        endpoint->broken = std::string(ibv_wc_status_str(wc.status)) + " (vendor error " +
                           std::to_string(wc.vendor_err) + ")";
      }
      const int code = CodeOfCompletion(wc.status, endpoint->cancelling());
      Fail(op, code,
           std::string("verbs: RDMA ") + (op->opcode == IBV_WR_RDMA_READ ? "READ" : "WRITE") +
               " " + CompletionCodeName(code) + ": " + ibv_wc_status_str(wc.status) +
               (wc.status == IBV_WC_REM_ACCESS_ERR
                    ? " (the remote key or address does not cover the peer's memory)"
                : wc.status == IBV_WC_RETRY_EXC_ERR ? " (the peer stopped answering)"
                                                    : ""));
    }
    if (!op->queued && op->outstanding == 0) over.push_back(op);
    PumpLocked(endpoint, &over);
    destroy = IdleAndClosing(endpoint);
  }
  CompleteAll(over);
  if (destroy) DestroyEndpoint(endpoint);
}

// Hands operations that ended outside the progress thread to it: callbacks
// run there and nowhere else.
void Defer(Context* context, const std::vector<Operation*>& over) {
  if (over.empty()) return;
  {
    std::lock_guard lock(context->deferred_mu);
    context->deferred.insert(context->deferred.end(), over.begin(), over.end());
    context->has_deferred = true;
  }
  const uint64_t one = 1;
  (void)!write(context->kick, &one, sizeof(one));
}

void RunDeferred(Context* context) {
  if (!context->has_deferred.load()) return;
  uint64_t count;
  (void)!read(context->kick, &count, sizeof(count));
  std::vector<Operation*> over;
  {
    std::lock_guard lock(context->deferred_mu);
    over.swap(context->deferred);
    context->has_deferred = false;
  }
  CompleteAll(over);
}

void DrainCq(Context* context) {
  ibv_wc completions[32];
  int count;
  while ((count = ibv_poll_cq(context->cq, 32, completions)) > 0) {
    for (int i = 0; i < count; ++i) OnCompletion(completions[i]);
  }
}

void ProgressLoop(Context* context) {
  if (context->settings.busy_poll) {
    while (!context->stop.load(std::memory_order_relaxed)) {
      DrainCq(context);
      RunDeferred(context);
    }
    return;
  }
  ibv_req_notify_cq(context->cq, 0);
  while (!context->stop.load()) {
    pollfd fds[3] = {{context->channel->fd, POLLIN, 0},
                     {context->wake, POLLIN, 0},
                     {context->kick, POLLIN, 0}};
    if (poll(fds, 3, -1) < 0) continue;
    if (fds[1].revents != 0) break;
    if (fds[2].revents != 0) RunDeferred(context);
    if (fds[0].revents == 0) continue;
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    if (ibv_get_cq_event(context->channel, &cq, &cq_context) != 0) continue;
    ibv_ack_cq_events(cq, 1);
    // Re-arm before draining, so a completion that lands in between wakes
    // the next poll instead of waiting for the one after it.
    ibv_req_notify_cq(cq, 0);
    DrainCq(context);
  }
}

// ---------------------------------------------------------------- the ABI

void Finalize(rdv_transport_context_t handle) {
  Context* context = ContextOf(handle);
  {
    // Endpoints disconnected while busy go when their flushes complete.
    std::unique_lock lock(context->endpoints_mu);
    if (!context->endpoints_gone.wait_for(lock, std::chrono::seconds(10),
                                          [&] { return context->live_endpoints == 0; })) {
      context->Log(0, "finalize with endpoints still open; their QPs leak");
    }
  }
  context->stop = true;
  if (context->wake >= 0) {
    const uint64_t one = 1;
    (void)!write(context->wake, &one, sizeof(one));
  }
  if (context->progress.joinable()) context->progress.join();
  if (context->acceptor.joinable()) context->acceptor.join();
  for (auto& [socket_fd, accepted] : context->accepted) {
    ibv_destroy_qp(accepted.qp);
    close(socket_fd);
  }
  if (context->listener >= 0) close(context->listener);
  if (context->wake >= 0) close(context->wake);
  if (context->kick >= 0) close(context->kick);
  if (context->cq != nullptr) ibv_destroy_cq(context->cq);
  if (context->channel != nullptr) ibv_destroy_comp_channel(context->channel);
  if (context->pd != nullptr) ibv_dealloc_pd(context->pd);
  if (context->device != nullptr) ibv_close_device(context->device);
  delete context;
}

int Init(const rdv_transport_init_params_t* params, rdv_transport_context_t* out,
         rdv_transport_error_t* error) {
  auto context = std::make_unique<Context>();
  if (params->field_mask & RDV_TRANSPORT_INIT_FIELD_LOG) {
    context->log = params->log;
    context->log_user = params->log_user;
  }
  if (params->field_mask & RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL) context->log_level = params->log_level;
  int code = ReadSettings(&context->settings, error);
  if (code == RDV_TRANSPORT_OK) code = OpenDevice(context.get(), error);
  if (code != RDV_TRANSPORT_OK) {
    Finalize(reinterpret_cast<rdv_transport_context_t>(context.release()));
    return code;
  }
  Context* c = context.get();
  c->pd = ibv_alloc_pd(c->device);
  c->channel = ibv_create_comp_channel(c->device);
  const int cq_size = std::min(c->device_attr.max_cqe, 1 << 16);
  c->cq = c->pd && c->channel ? ibv_create_cq(c->device, cq_size, nullptr, c->channel, 0) : nullptr;
  c->wake = eventfd(0, EFD_CLOEXEC);
  c->kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (c->cq == nullptr || c->wake < 0 || c->kick < 0) {
    code = ErrnoError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "protection domain or CQ", errno);
  } else {
    fcntl(c->channel->fd, F_SETFL, fcntl(c->channel->fd, F_GETFL) | O_NONBLOCK);
    code = StartListener(c, error);
  }
  if (code != RDV_TRANSPORT_OK) {
    Finalize(reinterpret_cast<rdv_transport_context_t>(context.release()));
    return code;
  }
  std::string gpu_why;
  c->gpu_path = ChooseGpuPath(c->pd, &gpu_why);
  c->Log(2, std::string("GPU memory path: ") + GpuPathName(c->gpu_path) + " (" + gpu_why +
                (c->gpu_path == GpuPath::kNone ? "; GPU tensors are staged through host memory)"
                                               : ")"));
  c->description = std::string("verbs ") + ibv_get_device_name(c->device->device) + " port " +
                   std::to_string(c->port) + ", GID " + std::to_string(c->gid_index) + " (" +
                   GidText(c->gid) + "), MTU " +
                   std::to_string(128 << c->port_attr.active_mtu) + ", " +
                   (c->settings.busy_poll ? "busy polling" : "completion channel") +
                   ", GPU memory: " + GpuPathName(c->gpu_path);
  c->progress = std::thread(ProgressLoop, c);
  c->acceptor = std::thread(AcceptLoop, c);
  *out = reinterpret_cast<rdv_transport_context_t>(context.release());
  return RDV_TRANSPORT_OK;
}

int Query(rdv_transport_context_t handle, rdv_transport_attributes_t* attributes,
          rdv_transport_error_t*) {
  Context* context = ContextOf(handle);
  const uint64_t mask = attributes->field_mask;
  if (mask & RDV_TRANSPORT_ATTR_FIELD_NAME) attributes->name = "verbs";
  const bool gpudirect = context->gpu_path != GpuPath::kNone;
  if (mask & RDV_TRANSPORT_ATTR_FIELD_MEMORY_TYPES) {
    attributes->memory_types =
        RDV_TRANSPORT_MEMORY_HOST | (gpudirect ? uint32_t{RDV_TRANSPORT_MEMORY_CUDA} : 0u);
  }
  if (mask & RDV_TRANSPORT_ATTR_FIELD_GPUDIRECT) attributes->gpudirect = gpudirect;
  if (mask & RDV_TRANSPORT_ATTR_FIELD_OPS) {
    attributes->ops = RDV_TRANSPORT_OP_GET | RDV_TRANSPORT_OP_PUT;
    attributes->preferred_op = RDV_TRANSPORT_OP_GET;
  }
  if (mask & RDV_TRANSPORT_ATTR_FIELD_DESCRIPTION) {
    std::snprintf(attributes->description, sizeof(attributes->description), "%s",
                  context->description.c_str());
  }
  return RDV_TRANSPORT_OK;
}

int LocalAddress(rdv_transport_context_t handle, void* buffer, size_t* length,
                 rdv_transport_error_t* error) {
  const Context* context = ContextOf(handle);
  return CopyOut(&context->address, sizeof(context->address), buffer, length, error);
}

int Connect(rdv_transport_context_t handle, const void* peer_address, size_t length,
            rdv_transport_endpoint_t* out, rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  WireAddress peer;
  if (length != sizeof(peer)) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: a peer address of %zu bytes is not a verbs address (%zu)", length,
                    sizeof(peer));
  }
  std::memcpy(&peer, peer_address, sizeof(peer));
  if (peer.magic != kAddressMagic || peer.version != kAddressVersion) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: the peer address is not a version %u verbs address", kAddressVersion);
  }
  if (peer.link_layer != context->port_attr.link_layer) {
    return SetError(error, RDV_TRANSPORT_FAILED_PRECONDITION,
                    "verbs: the peer's port is %s, this one %s",
                    peer.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
                    context->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE"
                                                                             : "InfiniBand");
  }
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->context = context;
  endpoint->credits = context->settings.queue_depth;
  endpoint->qp = CreateQp(context);
  if (endpoint->qp == nullptr) {
    return ErrnoError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "ibv_create_qp", errno);
  }
  const uint32_t psn = context->NewPsn();
  const QpInfo local = LocalInfo(context, endpoint->qp, psn);
  QpInfo remote{};
  int code = DialPeer(peer, &endpoint->socket, error);
  if (code == RDV_TRANSPORT_OK &&
      (!SendAll(endpoint->socket, &local, sizeof(local)) ||
       !ReceiveInfo(endpoint->socket, &remote))) {
    code = SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                    "verbs: the peer did not answer with its queue pair within %d ms",
                    kExchangeTimeoutMs);
  }
  if (code == RDV_TRANSPORT_OK) code = ConnectQp(context, endpoint->qp, psn, remote, error);
  if (code != RDV_TRANSPORT_OK) {
    ibv_destroy_qp(endpoint->qp);
    if (endpoint->socket >= 0) close(endpoint->socket);
    return code;
  }
  {
    std::lock_guard lock(context->endpoints_mu);
    ++context->live_endpoints;
  }
  *out = reinterpret_cast<rdv_transport_endpoint_t>(endpoint.release());
  return RDV_TRANSPORT_OK;
}

void Disconnect(rdv_transport_endpoint_t handle) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  bool idle = false;
  {
    std::lock_guard lock(endpoint->mu);
    endpoint->closing = true;
    if (endpoint->broken.empty()) endpoint->broken = "disconnected";
    idle = IdleAndClosing(endpoint);
    if (!idle) {
      // Flushes what is in flight; the last flush completion destroys it.
      ibv_qp_attr attr{};
      attr.qp_state = IBV_QPS_ERR;
      ibv_modify_qp(endpoint->qp, &attr, IBV_QP_STATE);
    }
  }
  if (idle) DestroyEndpoint(endpoint);
}

// The error state flushes every work request in flight (their completions
// come as cancelled); what waits for room in the queue fails here.
void Abort(rdv_transport_endpoint_t handle) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  std::vector<Operation*> over;
  {
    std::lock_guard lock(endpoint->mu);
    if (endpoint->aborted) return;
    endpoint->aborted = true;
    if (endpoint->broken.empty()) endpoint->broken = "aborted: its peer was lost";
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_ERR;
    ibv_modify_qp(endpoint->qp, &attr, IBV_QP_STATE);
    PumpLocked(endpoint, &over);
  }
  Defer(endpoint->context, over);
}

int CancelRecv(rdv_transport_context_t, uint64_t, rdv_transport_error_t* error) {
  return SetError(error, RDV_TRANSPORT_NOT_FOUND,
                  "verbs: tagged messages are not offered, so no receive waits");
}

int Register(Context* context, void* address, size_t length, void* owned,
             rdv_transport_memory_t* out, rdv_transport_error_t* error) {
  ibv_mr* mr = ibv_reg_mr(context->pd, address, length,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_WRITE);
  if (mr == nullptr) {
    const int err = errno;
    return SetError(error,
                    err == ENOMEM ? RDV_TRANSPORT_RESOURCE_EXHAUSTED
                                  : RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: ibv_reg_mr of %zu bytes at %p: %s%s", length, address,
                    std::strerror(err),
                    err == ENOMEM ? " (check `ulimit -l`: registered memory is pinned)" : "");
  }
  *out = reinterpret_cast<rdv_transport_memory_t>(new Memory{context, mr, owned});
  return RDV_TRANSPORT_OK;
}

// Registers the whole CUDA allocation around [address, +length): its other
// tensors then need no registration of their own.
int RegisterCuda(Context* context, void* address, size_t length, int device,
                 rdv_transport_memory_t* out, rdv_transport_error_t* error) {
  const CudaDriver* cuda = CudaDriver::Get();
  if (context->gpu_path == GpuPath::kNone || cuda == nullptr) {
    return SetError(error, RDV_TRANSPORT_UNIMPLEMENTED,
                    "verbs: GPU memory cannot be registered here (%s): load nvidia-peermem, or "
                    "use a kernel and driver with dma-buf support; rdv stages GPU tensors "
                    "through host memory meanwhile", GpuPathName(context->gpu_path));
  }
  void* cuda_context = nullptr;
  CudaDriver::DevicePtr base = 0;
  size_t size = 0;
  int cu_device = 0;
  if (cuda->device_get(&cu_device, device) != 0 ||
      cuda->primary_retain(&cuda_context, cu_device) != 0 || cuda->push(cuda_context) != 0) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT, "verbs: no CUDA device %d", device);
  }
  const bool ranged =
      cuda->address_range(&base, &size, reinterpret_cast<CudaDriver::DevicePtr>(address)) == 0;
  int code = RDV_TRANSPORT_OK;
  if (!ranged || reinterpret_cast<CudaDriver::DevicePtr>(address) + length > base + size) {
    code = SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: %zu bytes at %p are not inside one CUDA allocation", length, address);
  } else if (context->gpu_path == GpuPath::kDmaBuf) {
    int fd = -1;
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    const size_t span = (size + page - 1) / page * page;
    if (cuda->handle_for_range(&fd, base, span, CudaDriver::kDmaBufFd, 0) != 0) {
      code = SetError(error, RDV_TRANSPORT_INTERNAL,
                      "verbs: cuMemGetHandleForAddressRange failed for %zu bytes", span);
    } else {
      ibv_mr* mr = ibv_reg_dmabuf_mr(context->pd, 0, span, base, fd,
                                     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ |
                                         IBV_ACCESS_REMOTE_WRITE);
      const int err = errno;
      close(fd);
      code = mr != nullptr
                 ? (*out = reinterpret_cast<rdv_transport_memory_t>(new Memory{context, mr, nullptr}),
                    RDV_TRANSPORT_OK)
                 : ErrnoError(error, RDV_TRANSPORT_INTERNAL, "ibv_reg_dmabuf_mr", err);
    }
  } else {
    code = Register(context, reinterpret_cast<void*>(base), size, nullptr, out, error);
  }
  void* popped = nullptr;
  cuda->pop(&popped);
  return code;
}

int MemAlloc(rdv_transport_context_t handle, size_t length, rdv_transport_memory_t* out,
             void** address, rdv_transport_error_t* error) {
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, std::max<size_t>(length, 1)) != 0) {
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "verbs: cannot allocate %zu bytes",
                    length);
  }
  const int code = Register(ContextOf(handle), memory, std::max<size_t>(length, 1), memory, out,
                            error);
  if (code != RDV_TRANSPORT_OK) {
    std::free(memory);
    return code;
  }
  *address = memory;
  return RDV_TRANSPORT_OK;
}

int MemRegister(rdv_transport_context_t handle, void* address, size_t length,
                uint32_t memory_type, int device, rdv_transport_memory_t* out,
                rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  if (memory_type == RDV_TRANSPORT_MEMORY_HOST) {
    return Register(context, address, length, nullptr, out, error);
  }
  if (memory_type != RDV_TRANSPORT_MEMORY_CUDA) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT, "verbs: unknown memory type %u",
                    memory_type);
  }
  return RegisterCuda(context, address, length, device, out, error);
}

void MemRelease(rdv_transport_memory_t handle) {
  auto* memory = reinterpret_cast<Memory*>(handle);
  ibv_dereg_mr(memory->mr);
  std::free(memory->owned);
  delete memory;
}

int MemPack(rdv_transport_memory_t handle, void* buffer, size_t* length,
            rdv_transport_error_t* error) {
  const auto* memory = reinterpret_cast<const Memory*>(handle);
  const uint32_t rkey = memory->mr->rkey;
  const std::string sealed = Seal(&rkey, sizeof(rkey));
  return CopyOut(sealed.data(), sealed.size(), buffer, length, error);
}

int PostRdma(rdv_transport_endpoint_t handle, ibv_wr_opcode opcode, void* local,
             rdv_transport_memory_t local_memory, uint64_t remote_address,
             const void* remote_key, size_t remote_key_length, size_t length,
             rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  size_t key_length = 0;
  const void* key = Unseal(remote_key, remote_key_length, &key_length);
  if (key == nullptr || key_length != sizeof(uint32_t)) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: the peer's memory descriptor is not a verbs key sealed by rdv (%zu "
                    "bytes, truncated or corrupted)", remote_key_length);
  }
  if (local_memory == nullptr) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: the local buffer %p is not registered memory", local);
  }
  const ibv_mr* mr = reinterpret_cast<const Memory*>(local_memory)->mr;
  const auto* begin = static_cast<const char*>(mr->addr);
  if (static_cast<const char*>(local) < begin ||
      static_cast<const char*>(local) + length > begin + mr->length) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: %zu bytes at %p fall outside their registered region", length, local);
  }
  auto* op = new Operation();
  op->endpoint = endpoint;
  op->done = done;
  op->user = user;
  op->opcode = opcode;
  op->local = static_cast<char*>(local);
  op->lkey = mr->lkey;
  op->remote = remote_address;
  std::memcpy(&op->rkey, key, sizeof(op->rkey));
  op->length = length;
  std::vector<Operation*> over;
  {
    std::lock_guard lock(endpoint->mu);
    if (!endpoint->broken.empty()) {
      delete op;
      return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                      "verbs: the queue pair is out of service (%s); connect anew",
                      endpoint->broken.c_str());
    }
    if (length == 0) {
      op->queued = false;
      over.push_back(op);
    } else {
      endpoint->waiting.push_back(op);
      PumpLocked(endpoint, &over);
    }
  }
  // This operation, refused by the QP before any of it was posted, fails
  // the post; whatever else ended goes to the progress thread.
  const auto refused = std::find(over.begin(), over.end(), op);
  if (refused != over.end() && op->posted == 0 && length != 0) {
    over.erase(refused);
    const int code = SetError(error, op->code, "%s", op->message.c_str());
    delete op;
    Defer(endpoint->context, over);
    return code;
  }
  Defer(endpoint->context, over);
  return RDV_TRANSPORT_OK;
}

int PostGet(rdv_transport_endpoint_t endpoint, void* local, rdv_transport_memory_t local_memory,
            uint64_t remote_address, const void* remote_key, size_t remote_key_length,
            size_t length, rdv_transport_completion_fn done, void* user,
            rdv_transport_error_t* error) {
  return PostRdma(endpoint, IBV_WR_RDMA_READ, local, local_memory, remote_address, remote_key,
                  remote_key_length, length, done, user, error);
}

int PostPut(rdv_transport_endpoint_t endpoint, const void* local,
            rdv_transport_memory_t local_memory, uint64_t remote_address, const void* remote_key,
            size_t remote_key_length, size_t length, rdv_transport_completion_fn done, void* user,
            rdv_transport_error_t* error) {
  return PostRdma(endpoint, IBV_WR_RDMA_WRITE, const_cast<void*>(local), local_memory,
                  remote_address, remote_key, remote_key_length, length, done, user, error);
}

int PostSend(rdv_transport_endpoint_t, const void*, rdv_transport_memory_t, size_t, uint64_t,
             rdv_transport_completion_fn, void*, rdv_transport_error_t* error) {
  return SetError(error, RDV_TRANSPORT_UNIMPLEMENTED,
                  "verbs: tagged messages are not offered; use get or put");
}

int PostRecv(rdv_transport_context_t, void*, rdv_transport_memory_t, size_t, uint64_t,
             rdv_transport_completion_fn, void*, rdv_transport_error_t* error) {
  return SetError(error, RDV_TRANSPORT_UNIMPLEMENTED,
                  "verbs: tagged messages are not offered; use get or put");
}

const rdv_transport_v2_t kTransport = {
    RDV_TRANSPORT_ABI_VERSION, sizeof(rdv_transport_v2_t), "verbs", Init, Finalize, Query,
    LocalAddress, Connect, Disconnect, MemAlloc, MemRegister, MemRelease, MemPack,
    PostGet, PostPut, PostSend, PostRecv, Abort, CancelRecv,
};

}  // namespace

RDV_PLUGIN_EXPORT const rdv_transport_v2_t* rdv_transport_v2(void) { return &kTransport; }
