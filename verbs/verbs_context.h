// The verbs plugin's shared state: the context of one device port, its
// endpoints (one RC queue pair each), posted operations and registered
// memory, and what each part of the plugin offers the others. The parts:
// verbs_settings.cc (RDV_IB_*), verbs_device.cc (device, port and GID),
// verbs_memory.cc (host and GPU memory registration), verbs_connection.cc
// (queue pairs, their exchange over TCP, the acceptor), verbs_messages.cc
// (the slots messages are sent from and arrive in), verbs_progress.cc
// (posting, completions, the progress thread) and verbs_transport.cc (the
// ABI entry points).
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"

namespace rdv::verbs {

constexpr int kExchangeTimeoutMs = 5000;  // TCP connect and QP info swap
constexpr int kMaxReadsInFlight = 16;     // per QP, clamped to the device's limit
constexpr int kPeerCloseWaitMs = 200;     // for a dead peer's socket to close
// Messages (ABI v3): SENDs of at most kMaxMessageBytes into receive slots
// every QP shares (one shared receive queue per context). A sender finding
// no slot free waits for one (RNR retries without end), so a flood costs
// the receiver no memory.
constexpr size_t kMaxMessageBytes = 1024;
constexpr int kReceiveSlots = 256;  // clamped to the device's max_srq_wr
// A receive slot's work request id carries this bit; an operation's is its
// address, which never has it (user-space addresses).
constexpr uint64_t kReceiveWrId = uint64_t{1} << 63;

// The plugin's settings (verbs_settings.cc lists them; the host fills them
// from RDV_IB_*, docs/configuration.md).
struct Settings {
  std::string device;        // RDV_IB_DEVICE; empty: the first with an active port
  std::string connect_address;  // RDV_IB_CONNECT_ADDRESS; empty: the GID's IPv4
  int port = 0;              // RDV_IB_PORT; 0: the first active port
  int gid_index = -1;        // RDV_IB_GID_INDEX; -1: the port's RoCE v2 IPv4 GID
  int qp_timeout = 14;       // RDV_IB_QP_TIMEOUT: 4.096 us * 2^14 = 67 ms per try
  int retry_count = 7;       // RDV_IB_RETRY_COUNT
  int queue_depth = 128;     // RDV_IB_QUEUE_DEPTH: work requests in flight per QP
  size_t chunk_bytes = size_t{1} << 20;  // RDV_IB_CHUNK_BYTES
  bool busy_poll = false;    // RDV_IB_PROGRESS=poll
  std::chrono::microseconds spin{0};  // RDV_IB_SPIN_US: with wait, polling after work
};

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
  ibv_wr_opcode opcode;  // IBV_WR_SEND: a message, one work request
  char* local;
  uint32_t lkey;
  uint64_t remote;
  uint32_t rkey;
  size_t length;
  std::string payload;  // a message's bytes, copied at post_message
  int slot = -1;        // a message's send slot while it is posted
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
  // Registered slots messages are sent from, made at the first message:
  // queue_depth of them, so a free credit always finds a free slot.
  char* send_slots = nullptr;       // mu
  ibv_mr* send_slots_mr = nullptr;  // mu
  std::vector<int> free_send_slots; // mu
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

  // Messages peers send arrive in these slots (null: the device has no
  // shared receive queue, and messages are not offered).
  ibv_srq* srq = nullptr;
  char* receive_slots = nullptr;
  ibv_mr* receive_slots_mr = nullptr;
  rdv_transport_message_fn on_message = nullptr;  // set once at init
  void* on_message_user = nullptr;

  int listener = -1;
  int wake = -1;  // eventfd: stops the threads
  int kick = -1;  // eventfd: `deferred` has operations
  // Operations over, to report on the progress thread.
  plugin_support::ProgressQueue<Operation*> deferred;
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

  plugin_support::PluginLog log;  // the host's logger

  uint32_t NewPsn() {
    std::lock_guard lock(random_mu);
    return random() & 0xffffff;
  }
};

inline Context* ContextOf(rdv_transport_context_t handle) {
  return reinterpret_cast<Context*>(handle);
}

// verbs_settings.cc: the table the ABI's `settings` returns, and init's
// settings read into `settings` (INVALID_ARGUMENT naming the one refused).
const rdv_transport_setting_info_t* SettingsTable(size_t* count);
int ReadSettings(const rdv_transport_init_params_t* params, Settings* settings,
                 rdv_transport_error_t* error);

// verbs_device.cc
int ErrnoError(rdv_transport_error_t* error, int code, const char* what, int err);
bool IsIpv4Mapped(const ibv_gid& gid);
std::string GidText(const ibv_gid& gid);
// Opens RDV_IB_DEVICE (or the first device with an active port), picks the
// port and the GID.
int OpenDevice(Context* context, rdv_transport_error_t* error);

// verbs_memory.cc
const char* GpuPathName(GpuPath path);
GpuPath ChooseGpuPath(ibv_pd* pd, std::string* why);
// Registers host memory; `owned` (mem_alloc's) is freed with it.
int Register(Context* context, void* address, size_t length, void* owned,
             rdv_transport_memory_t* out, rdv_transport_error_t* error);
int RegisterCuda(Context* context, void* address, size_t length, int device,
                 rdv_transport_memory_t* out, rdv_transport_error_t* error);

// verbs_connection.cc
ibv_qp* CreateQp(Context* context);
QpInfo LocalInfo(Context* context, ibv_qp* qp, uint32_t psn);
int ConnectQp(Context* context, ibv_qp* qp, uint32_t local_psn, const QpInfo& peer,
              rdv_transport_error_t* error);
bool SendAll(int socket, const void* data, size_t size);
bool ReceiveInfo(int socket, QpInfo* info);
int DialPeer(const WireAddress& peer, int* out, rdv_transport_error_t* error);
int StartListener(Context* context, rdv_transport_error_t* error);
// The acceptor thread: answers peers' connections, frees what they served
// when they go.
void AcceptLoop(Context* context);

// verbs_messages.cc
// The shared receive queue and its slots, all posted; without one (a device
// with no SRQ) messages are not offered, which is not an error.
int StartMessages(Context* context, rdv_transport_error_t* error);
void StopMessages(Context* context);
// A receive slot's completion (on the progress thread): hands the message
// to on_message, then posts the slot again.
void OnReceive(Context* context, const ibv_wc& wc);
// The endpoint's send slots, made at its first message. Caller holds
// endpoint->mu.
int EnsureSendSlotsLocked(Endpoint* endpoint, rdv_transport_error_t* error);
void FreeSendSlots(Endpoint* endpoint);

// verbs_progress.cc
// Posts what the QP has room for; returns operations that are over.
// Caller holds endpoint->mu.
void PumpLocked(Endpoint* endpoint, std::vector<Operation*>* over);
void DestroyEndpoint(Endpoint* endpoint);
bool IdleAndClosing(Endpoint* endpoint);
// Hands operations that ended outside the progress thread to it: callbacks
// run there and nowhere else.
void Defer(Context* context, const std::vector<Operation*>& over);
// The progress thread: completions, then deferred callbacks.
void ProgressLoop(Context* context);

}  // namespace rdv::verbs
