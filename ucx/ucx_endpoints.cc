// Endpoints: connect to a peer's worker address, close gracefully, or abort
// when the peer is lost.
#include "ucx/ucx_context.h"

#include <string>
#include <utility>
#include <vector>

#include "plugin/plugin_support.h"

namespace rdv::ucx_plugin {

using plugin_support::SetError;
using plugin_support::Unseal;

namespace {

void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* endpoint = static_cast<Endpoint*>(arg);
  endpoint->failure.store(status, std::memory_order_release);
  // Info, not a warning: a peer that stops closes its endpoints, which
  // fails ours with a timeout or reset at every orderly end. A peer that
  // was lost is the host's to report, as are the transfers this fails
  // (they carry the status).
  endpoint->context->log(2, std::string("UCX endpoint failed: ") + ucs_status_string(status));
}

}  // namespace

int Connect(rdv_transport_context_t handle, const void* sealed_address, size_t length,
            rdv_transport_endpoint_t* out, rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  size_t address_length = 0;
  const void* peer_address = Unseal(sealed_address, length, &address_length);
  if (peer_address == nullptr) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "the peer's address is not a UCX worker address packed by rdv (%zu bytes, "
                    "truncated or corrupted)", length);
  }
  auto* endpoint = new Endpoint;
  endpoint->context = context;
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = static_cast<const ucp_address_t*>(peer_address);
  ucs_status_t status = UCS_ERR_UNREACHABLE;
  if (context->peer_failure_handling) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = OnEndpointError;
    params.err_handler.arg = endpoint;
    status = ucp_ep_create(context->worker, &params, &endpoint->ep);
  }
  if (status == UCS_ERR_UNREACHABLE) {
    // UCX 1.13's shared-memory transports cannot report a lost peer; rdv
    // then learns of it from the control plane (gRPC keepalive) instead.
    params.field_mask &= ~uint64_t{UCP_EP_PARAM_FIELD_ERR_HANDLER};
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    status = ucp_ep_create(context->worker, &params, &endpoint->ep);
    if (status == UCS_OK) {
      context->log(2, "UCX endpoint without peer-failure handling (transports lack it)");
    }
  }
  if (status != UCS_OK) {
    delete endpoint;
    return UcxError(error, status, "ucp_ep_create (is the peer's address from this UCX_TLS?)");
  }
  context->Wake();
  *out = reinterpret_cast<rdv_transport_endpoint_t>(endpoint);
  return RDV_TRANSPORT_OK;
}

namespace {

// The endpoint goes outside UCX's calls: its key cache's lock is held
// across ucp_ep_rkey_unpack, so it must not be taken under the worker lock.
void CloseDone(Close* close) {
  Context* context = close->context;
  if (Endpoint* owned = close->owned) context->Deliver([owned] { delete owned; });
  {
    std::lock_guard lock(context->closing_mu);
    context->closing.erase(close);
    if (context->closing.empty()) context->closed.notify_all();
  }
  delete close;
}

void OnCloseDone(void* request, ucs_status_t, void* user) {
  ucp_request_free(request);
  CloseDone(static_cast<Close*>(user));
}

// Starts closing `ep` without waiting (it may run on the progress thread);
// `close` is freed when the close is done.
void StartClose(ucp_ep_h ep, Close* close, uint32_t flags) {
  Context* context = close->context;
  {
    std::lock_guard lock(context->closing_mu);
    context->closing.emplace(close, nullptr);
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS | UCP_OP_ATTR_FIELD_CALLBACK |
                       UCP_OP_ATTR_FIELD_USER_DATA;
  param.flags = flags;
  param.cb.send = OnCloseDone;
  param.user_data = close;
  void* request = ucp_ep_close_nbx(ep, &param);
  if (!UCS_PTR_IS_PTR(request)) {
    CloseDone(close);
    return;
  }
  {
    // Unless the close already completed (its callback erased the entry).
    std::lock_guard lock(context->closing_mu);
    if (auto it = context->closing.find(close); it != context->closing.end()) {
      it->second = request;
    }
  }
  context->Wake();
}

}  // namespace

// Closes gracefully: a forced close leaves the peer's side of a tcp
// connection half alive, and a later endpoint between the same two workers
// then lost puts silently. The endpoint (its error handler's argument)
// lives until the close is done.
void Disconnect(rdv_transport_endpoint_t handle) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  Context* context = endpoint->context;
  if (!endpoint->proven.load(std::memory_order_relaxed)) context->unproven_closes.fetch_add(1);
  endpoint->keys.Clear();
  if (endpoint->ep == nullptr) {
    // Aborted: nothing left to close, once the abort has run.
    endpoint->context->RunOnProgressThread([endpoint] { delete endpoint; });
    return;
  }
  StartClose(endpoint->ep, new Close{context, endpoint}, 0);
}

namespace {

// On the progress thread. A forced close completes what UCX tracks with
// UCS_ERR_CANCELED. It does not track operations on endpoints without
// failure handling (shared memory): a software get there waits for the
// dead peer's reply forever. Those complete here, and UCX's hold on them
// is freed when it lets go (at the latest, at finalize).
void ForceClose(Endpoint* endpoint, ucp_ep_h ep) {
  Context* context = endpoint->context;
  StartClose(ep, new Close{context}, UCP_EP_CLOSE_FLAG_FORCE);
  std::vector<Operation*> stuck;
  {
    std::lock_guard lock(endpoint->in_flight_mu);
    stuck.assign(endpoint->in_flight.begin(), endpoint->in_flight.end());
    endpoint->in_flight.clear();
  }
  for (Operation* op : stuck) {
    Ended(op);
    op->orphaned = true;
    op->endpoint = nullptr;
    context->orphans.insert(op);
    op->done(op->user, RDV_TRANSPORT_CANCELLED,
             "UCX: the transfer was abandoned: its endpoint was aborted (the peer was lost)");
  }
}

}  // namespace

void Abort(rdv_transport_endpoint_t handle) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  ucp_ep_h ep = nullptr;
  {
    std::lock_guard lock(endpoint->use_mu);
    ep = std::exchange(endpoint->ep, nullptr);
    if (ep == nullptr) return;
    if (!endpoint->proven.load(std::memory_order_relaxed)) {
      endpoint->context->unproven_closes.fetch_add(1);
    }
    endpoint->failure.store(UCS_ERR_CANCELED, std::memory_order_release);
    endpoint->keys.Clear();  // keys belong to the endpoint's ep
  }
  Context* context = endpoint->context;
  // The host aborts for a lost peer (and says so with what was in flight)
  // and for every endpoint when it stops: no warning of its own here.
  context->log(2, "UCX endpoint aborted (its peer was lost, or this worker is stopping)");
  context->RunOnProgressThread([endpoint, ep] { ForceClose(endpoint, ep); });
}

}  // namespace rdv::ucx_plugin
