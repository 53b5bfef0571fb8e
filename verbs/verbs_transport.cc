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
// Messages (ABI v3) are SENDs, queued in order with the transfers, into the
// shared receive queue every QP of the peer's context takes its receives
// from (verbs_messages.cc).
//
// A completion error fails its transfer with the ibv_wc_status string and
// puts the QP out of service: later posts on that endpoint fail at once
// with UNAVAILABLE, and rdv makes a new endpoint (a new QP) for the next
// transfer. Nothing here aborts the process.
#include <fcntl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"
#include "verbs/verbs_context.h"

namespace rdv::verbs {
namespace {

using plugin_support::CopyOut;
using plugin_support::Seal;
using plugin_support::SetError;
using plugin_support::Unseal;

void Finalize(rdv_transport_context_t handle) {
  Context* context = ContextOf(handle);
  {
    // Endpoints disconnected while busy go when their flushes complete.
    std::unique_lock lock(context->endpoints_mu);
    if (!context->endpoints_gone.wait_for(lock, std::chrono::seconds(10),
                                          [&] { return context->live_endpoints == 0; })) {
      context->log(0, "finalize with endpoints still open; their QPs leak");
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
  StopMessages(context);
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
  context->log.Configure(params);
  if (params->field_mask & RDV_TRANSPORT_INIT_FIELD_MESSAGES) {
    context->on_message = params->on_message;
    context->on_message_user = params->on_message_user;
  }
  int code = ReadSettings(params, &context->settings, error);
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
    code = StartMessages(c, error);
    if (code == RDV_TRANSPORT_OK) code = StartListener(c, error);
  }
  if (code != RDV_TRANSPORT_OK) {
    Finalize(reinterpret_cast<rdv_transport_context_t>(context.release()));
    return code;
  }
  std::string gpu_why;
  c->gpu_path = ChooseGpuPath(c->pd, &gpu_why);
  c->log(2, std::string("GPU memory path: ") + GpuPathName(c->gpu_path) + " (" + gpu_why +
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
    attributes->ops = RDV_TRANSPORT_OP_GET | RDV_TRANSPORT_OP_PUT |
                      (context->srq != nullptr ? uint32_t{RDV_TRANSPORT_OP_MESSAGE} : 0u);
    attributes->preferred_op = RDV_TRANSPORT_OP_GET;
  }
  if (mask & RDV_TRANSPORT_ATTR_FIELD_MAX_MESSAGE) {
    attributes->max_message_bytes = context->srq != nullptr ? kMaxMessageBytes : 0;
  }
  // The QP executes its work requests in order, and the peer's NIC places a
  // WRITE's bytes before it completes a later SEND's receive.
  if (mask & RDV_TRANSPORT_ATTR_FIELD_MESSAGES_FOLLOW_PUTS) {
    attributes->messages_follow_puts = context->srq != nullptr;
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

// The message is copied before this returns; it waits in the endpoint's
// queue, in order with its transfers, until the QP has room.
int PostMessage(rdv_transport_endpoint_t handle, const void* message, size_t length,
                rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  if (endpoint->context->srq == nullptr) {
    return SetError(error, RDV_TRANSPORT_UNIMPLEMENTED,
                    "verbs: messages are not offered: the device has no shared receive queue");
  }
  if (length > kMaxMessageBytes) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "verbs: a message of %zu bytes; verbs messages carry at most %zu", length,
                    kMaxMessageBytes);
  }
  auto op = std::make_unique<Operation>();
  op->endpoint = endpoint;
  op->done = done;
  op->user = user;
  op->opcode = IBV_WR_SEND;
  op->payload.assign(static_cast<const char*>(message), length);
  op->length = length;
  std::vector<Operation*> over;
  {
    std::lock_guard lock(endpoint->mu);
    if (!endpoint->broken.empty()) {
      return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                      "verbs: the queue pair is out of service (%s); connect anew",
                      endpoint->broken.c_str());
    }
    if (int code = EnsureSendSlotsLocked(endpoint, error)) return code;
    endpoint->waiting.push_back(op.release());
    PumpLocked(endpoint, &over);
  }
  Defer(endpoint->context, over);
  return RDV_TRANSPORT_OK;
}

const rdv_transport_v3_t kTransport = {
    3, sizeof(rdv_transport_v3_t), "verbs", Init, Finalize, Query,
    LocalAddress, Connect, Disconnect, MemAlloc, MemRegister, MemRelease, MemPack,
    PostGet, PostPut, PostSend, PostRecv, Abort, CancelRecv, SettingsTable, PostMessage,
    /*mem_query=*/nullptr,
};

}  // namespace
}  // namespace rdv::verbs

RDV_PLUGIN_EXPORT const rdv_transport_v3_t* rdv_transport_v3(void) {
  return &rdv::verbs::kTransport;
}
