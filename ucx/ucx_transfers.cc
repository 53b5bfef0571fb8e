// Transfers: get, put (flushed before it completes), tagged send and
// receive, messages (eager active messages), and their completions, which
// run on the progress thread.
#include "ucx/ucx_context.h"

#include <cstring>
#include <string>
#include <utility>

#include "plugin/plugin_support.h"

namespace rdv::ucx_plugin {

using plugin_support::SetError;
using plugin_support::Unseal;

namespace {

// False for an operation an abort already completed: UCX let go of it at
// last, and it is freed here.
bool Untrack(Operation* op) {
  if (op->orphaned) {
    op->context->orphans.erase(op);
    delete op;
    return false;
  }
  if (op->endpoint != nullptr) {
    std::lock_guard lock(op->endpoint->in_flight_mu);
    op->endpoint->in_flight.erase(op);
  }
  return true;
}

void Complete(Operation* op, ucs_status_t status) {
  if (status == UCS_OK && op->endpoint != nullptr) {
    op->endpoint->proven.store(true, std::memory_order_relaxed);
  }
  Ended(op);
  if (!Untrack(op)) return;
  op->context->Deliver([op, status] {
    if (status == UCS_OK) {
      op->done(op->user, RDV_TRANSPORT_OK, nullptr);
    } else {
      const std::string message =
          std::string("UCX transfer failed: ") + ucs_status_string(status);
      op->done(op->user, CodeOf(status), message.c_str());
    }
    delete op;
  });
}

void OnSendDone(void* request, ucs_status_t status, void* user) {
  Complete(static_cast<Operation*>(user), status);
  ucp_request_free(request);
}

// A put's completion only frees the local buffer; the flush after it
// completes once the bytes are in the peer's memory. Over shared memory too:
// a put of memory UCX did not allocate travels as active messages, written
// by the peer's progress after the put completed locally (the test that
// freed the destination then crashed the peer).
void OnPutDone(void* request, ucs_status_t status, void* user) {
  ucp_request_free(request);
  auto* op = static_cast<Operation*>(user);
  if (status != UCS_OK || op->orphaned) {
    Complete(op, status);
    return;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.send = OnSendDone;
  param.user_data = op;
  const ucs_status_ptr_t flush = ucp_ep_flush_nbx(op->flush_after, &param);
  if (UCS_PTR_IS_ERR(flush)) Complete(op, UCS_PTR_STATUS(flush));
}

// The request is freed on the progress thread, outside UCX's calls: a
// cancel there that found it before this left the table is still UCX's
// request when it runs (a completed one is not cancelled).
void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user) {
  auto* op = static_cast<Operation*>(user);
  Context* context = op->receiver;
  {
    std::lock_guard lock(context->recvs_mu);
    if (auto it = context->recvs.find(op->tag);
        it != context->recvs.end() && it->second.op == op) {
      context->recvs.erase(it);
    }
  }
  Complete(op, status);
  context->Deliver([request] { ucp_request_free(request); });
}

int Aborted(rdv_transport_error_t* error) {
  return SetError(error, RDV_TRANSPORT_UNAVAILABLE,
                  "the UCX endpoint was aborted: its peer was lost");
}

// Posts through `start`, which returns UCX's request; the operation always
// completes through the callback (no immediate completion).
template <typename Start>
int Post(Endpoint* endpoint, Context* context, Operation* op, Start start,
         rdv_transport_error_t* error, const char* what) {
  if (endpoint != nullptr) {
    const ucs_status_t failure = endpoint->failure.load(std::memory_order_acquire);
    if (failure != UCS_OK) {
      delete op;
      return SetError(error, RDV_TRANSPORT_UNAVAILABLE, "UCX endpoint failed earlier: %s",
                      ucs_status_string(failure));
    }
  }
  // Tracked before it starts: it may complete at once on the progress
  // thread. The caller holds endpoint->use_mu.
  op->context = context;
  if (endpoint != nullptr) {
    op->endpoint = endpoint;
    op->started = true;
    context->started.fetch_add(1, std::memory_order_acq_rel);
    std::lock_guard lock(endpoint->in_flight_mu);
    endpoint->in_flight.insert(op);
  }
  const ucs_status_ptr_t request = [&] {
    const PostingScope posting(context);
    return start();
  }();
  if (UCS_PTR_IS_ERR(request)) {
    if (endpoint != nullptr) {
      std::lock_guard lock(endpoint->in_flight_mu);
      endpoint->in_flight.erase(op);
    }
    Ended(op);
    delete op;
    return UcxError(error, UCS_PTR_STATUS(request), what);
  }
  context->Wake();
  return RDV_TRANSPORT_OK;
}

ucp_request_param_t SendParam(Operation* op) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.send = OnSendDone;
  param.user_data = op;
  return param;
}

// A get (or put) of the peer's segment `region` names, through this
// context's attachment of it: read-only for a get. Completes on the
// progress thread, as UCX's operations do.
template <bool kGet>
int CopyThroughSegment(Context* context, const KeyRegion& region, void* local,
                       uint64_t remote_address, size_t length, rdv_transport_completion_fn done,
                       void* user, rdv_transport_error_t* error) {
  std::shared_ptr<const Attachment> attachment;
  const int code =
      context->attachments.Attach(region.segment_id, region.length, !kGet, &attachment, error);
  if (code != RDV_TRANSPORT_OK) return code;
  char* remote = const_cast<char*>(attachment->base) + (remote_address - region.address);
  if (kGet) {
    context->copier.Copy(local, remote, length);
  } else {
    context->copier.Copy(remote, local, length);
  }
  context->Deliver([done, user] { done(user, RDV_TRANSPORT_OK, nullptr); });
  return RDV_TRANSPORT_OK;
}

template <bool kGet>
int PostRma(rdv_transport_endpoint_t handle, void* local, uint64_t remote_address,
            const void* remote_key, size_t remote_key_length, size_t length,
            rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  size_t blob_length = 0;
  const void* blob = Unseal(remote_key, remote_key_length, &blob_length);
  if (blob == nullptr || blob_length <= sizeof(KeyRegion)) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "the peer's memory descriptor is not a UCX key packed by rdv (%zu bytes, "
                    "truncated or corrupted)", remote_key_length);
  }
  KeyRegion region;
  std::memcpy(&region, blob, sizeof(region));
  if (remote_address < region.address || length > region.length ||
      remote_address - region.address > region.length - length) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "%zu bytes at 0x%llx are outside the %llu bytes at 0x%llx the peer's key "
                    "reaches", length, static_cast<unsigned long long>(remote_address),
                    static_cast<unsigned long long>(region.length),
                    static_cast<unsigned long long>(region.address));
  }
  const void* key = static_cast<const char*>(blob) + sizeof(KeyRegion);
  const size_t key_length = blob_length - sizeof(KeyRegion);
  std::unique_lock lock(endpoint->use_mu);
  if (endpoint->ep == nullptr) return Aborted(error);
  // Once the endpoint's wireup is done (UCX 1.13 fails an assertion when
  // an endpoint still in wireup is aborted, and a copy alone would leave it
  // so), a peer's segment on this host is copied through, not handed to
  // UCX.
  if (region.segment_id >= 0 && endpoint->proven.load(std::memory_order_relaxed) &&
      SameIpcScope(region.scope)) {
    // The copy uses no part of the endpoint. Held through it, use_mu kept
    // every message posted on the endpoint meanwhile (the next Recv's
    // request) waiting for the copy, and its unlock woke that poster.
    Context* context = endpoint->context;
    lock.unlock();
    return CopyThroughSegment<kGet>(context, region, local, remote_address, length, done, user,
                                    error);
  }
  ucp_rkey_h rkey = nullptr;
  const ucs_status_t unpacked = endpoint->keys.Get(endpoint->ep, key, key_length, &rkey);
  if (unpacked != UCS_OK) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "the peer's memory descriptor does not unpack: %s",
                    ucs_status_string(unpacked));
  }
  auto* op = new Operation{done, user};
  return Post(endpoint, endpoint->context, op, [&] {
    ucp_request_param_t param = SendParam(op);
    if (kGet) return ucp_get_nbx(endpoint->ep, local, length, remote_address, rkey, &param);
    op->flush_after = endpoint->ep;
    param.cb.send = OnPutDone;
    return ucp_put_nbx(endpoint->ep, local, length, remote_address, rkey, &param);
  }, error, kGet ? "ucp_get_nbx" : "ucp_put_nbx");
}

}  // namespace

int PostGet(rdv_transport_endpoint_t endpoint, void* local, rdv_transport_memory_t,
            uint64_t remote_address, const void* remote_key, size_t remote_key_length,
            size_t length, rdv_transport_completion_fn done, void* user,
            rdv_transport_error_t* error) {
  return PostRma<true>(endpoint, local, remote_address, remote_key, remote_key_length, length,
                       done, user, error);
}

int PostPut(rdv_transport_endpoint_t endpoint, const void* local, rdv_transport_memory_t,
            uint64_t remote_address, const void* remote_key, size_t remote_key_length,
            size_t length, rdv_transport_completion_fn done, void* user,
            rdv_transport_error_t* error) {
  return PostRma<false>(endpoint, const_cast<void*>(local), remote_address, remote_key,
                        remote_key_length, length, done, user, error);
}

int PostSend(rdv_transport_endpoint_t handle, const void* local, rdv_transport_memory_t,
             size_t length, uint64_t tag, rdv_transport_completion_fn done, void* user,
             rdv_transport_error_t* error) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  std::lock_guard lock(endpoint->use_mu);
  if (endpoint->ep == nullptr) return Aborted(error);
  auto* op = new Operation{done, user};
  return Post(endpoint, endpoint->context, op, [&] {
    const ucp_request_param_t param = SendParam(op);
    return ucp_tag_send_nbx(endpoint->ep, local, length, tag, &param);
  }, error, "ucp_tag_send_nbx");
}

int PostRecv(rdv_transport_context_t handle, void* local, rdv_transport_memory_t, size_t length,
             uint64_t tag, rdv_transport_completion_fn done, void* user,
             rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  auto* op = new Operation{done, user};
  op->receiver = context;
  op->tag = tag;
  // Tracked before it is posted: UCX may complete it inside the post (a
  // send already arrived), which then finds and drops the entry.
  {
    std::lock_guard lock(context->recvs_mu);
    context->recvs.insert_or_assign(tag, Context::WaitingRecv{op, nullptr});
  }
  void* posted = nullptr;
  const int code = Post(nullptr, context, op, [&] {
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = OnRecvDone;
    param.user_data = op;
    const ucs_status_ptr_t request =
        ucp_tag_recv_nbx(context->worker, local, length, tag, ~uint64_t{0}, &param);
    posted = request;
    return request;
  }, error, "ucp_tag_recv_nbx");
  // Unless it already completed (and left the table).
  std::lock_guard lock(context->recvs_mu);
  auto it = context->recvs.find(tag);
  if (it == context->recvs.end() || it->second.op != op) return code;
  if (code == RDV_TRANSPORT_OK) {
    it->second.request = posted;
  } else {
    context->recvs.erase(it);
  }
  return code;
}

int PostMessage(rdv_transport_endpoint_t handle, const void* message, size_t length,
                rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error) {
  if (length > kMaxMessageBytes) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "a message of %zu bytes; UCX messages carry at most %zu", length,
                    kMaxMessageBytes);
  }
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  std::lock_guard lock(endpoint->use_mu);
  if (endpoint->ep == nullptr) return Aborted(error);
  auto* op = new Operation{done, user};
  // Copied: the caller's bytes may go once this returns, UCX's send later.
  op->message.assign(static_cast<const char*>(message), length);
  return Post(endpoint, endpoint->context, op, [&] {
    ucp_request_param_t param = SendParam(op);
    param.op_attr_mask |= UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_AM_SEND_FLAG_EAGER;
    return ucp_am_send_nbx(endpoint->ep, kMessageAmId, nullptr, 0, op->message.data(),
                           op->message.size(), &param);
  }, error, "ucp_am_send_nbx");
}

ucs_status_t OnMessage(void* arg, const void*, size_t, void* data, size_t length,
                       const ucp_am_recv_param_t* param) {
  auto* context = static_cast<Context*>(arg);
  // Only a peer that is not rdv's sends one so large that UCX chose a
  // rendezvous for it: dropped, which fails its send.
  if (param->recv_attr & UCP_AM_RECV_ATTR_FLAG_RNDV) {
    context->log(1, "dropped a UCX message of " + std::to_string(length) +
                        " bytes sent by rendezvous (rdv's are eager)");
    return UCS_ERR_MESSAGE_TRUNCATED;
  }
  // Delivered after ucp_worker_progress returns (Context::completions): the
  // fast path answers a request by posting a send.
  context->Deliver(
      [context, message = std::string(static_cast<const char*>(data), length)] {
        context->on_message(context->on_message_user, message.data(), message.size());
      });
  return UCS_OK;
}

namespace {

// On the progress thread, where a completed receive's request is freed
// (OnRecvDone): one found here is still UCX's while this runs.
void CancelWaitingRecv(Context* context, uint64_t tag) {
  void* request = nullptr;
  {
    std::lock_guard lock(context->recvs_mu);
    if (auto it = context->recvs.find(tag); it != context->recvs.end()) {
      request = it->second.request;
    }
  }
  if (request != nullptr) ucp_request_cancel(context->worker, request);
}

}  // namespace

int CancelRecv(rdv_transport_context_t handle, uint64_t tag, rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  {
    std::lock_guard lock(context->recvs_mu);
    auto it = context->recvs.find(tag);
    if (it == context->recvs.end() || it->second.request == nullptr) {
      return SetError(error, RDV_TRANSPORT_NOT_FOUND, "no tagged receive waits under tag %llu",
                      static_cast<unsigned long long>(tag));
    }
  }
  context->RunOnProgressThread([context, tag] { CancelWaitingRecv(context, tag); });
  return RDV_TRANSPORT_OK;
}

}  // namespace rdv::ucx_plugin
