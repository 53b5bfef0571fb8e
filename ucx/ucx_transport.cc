// librdv_transport_ucx.so: rdv's transport ABI (plugin/rdv_transport.h) on
// UCX's UCP API. One context = one UCP context and worker, progressed by a
// dedicated thread that sleeps on the worker's event fd when idle (setting
// progress=poll keeps it spinning). Honours every UCX_* variable
// (UCX_TLS, UCX_NET_DEVICES, ...), read by ucp_config_read; the tls setting,
// when given, wins over UCX_TLS.
#include <poll.h>
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include <ucs/debug/log_def.h>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"
#include "ucx/ucx_context.h"
#include "ucx/ucx_segment_sizes.h"
#include "ucx/ucx_settings.h"

namespace rdv::ucx_plugin {

using plugin_support::CopyOut;
using plugin_support::Seal;
using plugin_support::SetError;

int CodeOf(ucs_status_t status) {
  switch (status) {
    case UCS_OK: return RDV_TRANSPORT_OK;
    case UCS_ERR_CANCELED: return RDV_TRANSPORT_CANCELLED;
    case UCS_ERR_INVALID_PARAM: return RDV_TRANSPORT_INVALID_ARGUMENT;
    case UCS_ERR_NO_MEMORY:
    case UCS_ERR_NO_RESOURCE:
    case UCS_ERR_EXCEEDS_LIMIT: return RDV_TRANSPORT_RESOURCE_EXHAUSTED;
    case UCS_ERR_UNSUPPORTED: return RDV_TRANSPORT_UNIMPLEMENTED;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_SHMEM_SEGMENT:  // the peer's segment is gone: the peer died
    case UCS_ERR_IO_ERROR:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED: return RDV_TRANSPORT_UNAVAILABLE;
    default: return RDV_TRANSPORT_INTERNAL;
  }
}

int UcxError(rdv_transport_error_t* error, ucs_status_t status, const char* what) {
  return SetError(error, CodeOf(status), "UCX %s: %s", what, ucs_status_string(status));
}

namespace {

// How long an idle progress thread sleeps before it looks again unasked.
// UCX 1.13 can miss the event of a message that arrives over rc_verbs and
// ud_verbs: in the SoftRoCE guest, 1 fast-path message in about 200 then
// waited 19 s, until UCX's keepalive (every 20 s) woke the worker (the
// same hang rapidsai/ucxx#15 reports; UCX 1.14's new protocols avoid it).
constexpr int kIdleWaitMs = 10;

void ProgressLoop(Context* context) {
  context->progress_id.store(std::this_thread::get_id(), std::memory_order_release);
  auto last_work = std::chrono::steady_clock::now();
  while (!context->stop.load(std::memory_order_acquire)) {
    context->RunTasks();
    if (!context->PostsEndSoon()) {
      sched_yield();
      continue;
    }
    const unsigned progressed = ucp_worker_progress(context->worker);
    if (progressed != 0 || !context->completions.empty()) {
      if (context->spin.count() > 0) last_work = std::chrono::steady_clock::now();
      continue;
    }
    // A reply often follows soon: polling a little longer spares a wake-up.
    // Yielding between polls lets a thread that waits on this CPU (a Recv's
    // caller, spinning before it sleeps) run now, not after a time slice.
    if (context->busy_poll || (context->spin.count() > 0 &&
                               std::chrono::steady_clock::now() - last_work < context->spin)) {
      sched_yield();
      continue;
    }
    // From here posts and tasks signal the worker (Context::Wake,
    // RunOnProgressThread); one posted or queued before this store is found
    // below. Its completions, like the loop's, run before any sleep.
    context->sleeping.store(true, std::memory_order_seq_cst);
    if (ucp_worker_progress(context->worker) != 0 || !context->completions.empty() ||
        context->tasks.Pending()) {
      context->sleeping.store(false, std::memory_order_relaxed);
      continue;
    }
    const ucs_status_t armed = ucp_worker_arm(context->worker);
    if (armed == UCS_OK) {
      pollfd wait{context->event_fd, POLLIN, 0};
      // ucp_worker_signal wakes it for new work and stop.
      poll(&wait, 1, context->started.load(std::memory_order_acquire) > 0 ? 1 : kIdleWaitMs);
    } else if (armed != UCS_ERR_BUSY) {
      context->log(0, std::string("ucp_worker_arm: ") + ucs_status_string(armed));
    }
    context->sleeping.store(false, std::memory_order_relaxed);
  }
}

// Whether this UCX fails an assertion when it destroys a worker whose
// endpoint to a lost peer still queues its wireup request on a UD lane:
// before 1.14 (openucx/ucx#8175), with a UD transport among its resources.
bool WireupPurgeAsserts(ucp_context_h ucp) {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major > 1 || minor >= 14) return false;
  char* text = nullptr;
  size_t size = 0;
  FILE* out = open_memstream(&text, &size);
  if (out == nullptr) return true;
  ucp_context_print_info(ucp, out);
  std::fclose(out);
  const bool ud = std::strstr(text, "ud_") != nullptr;
  std::free(text);
  return ud;
}

// A worker that may hold an endpoint whose wireup never finished (one closed
// before anything on it succeeded: its peer may have been lost early) is
// not destroyed where that aborts the process: it stays, idle, until the
// process exits, with the operations UCX has not let go of. Their callbacks
// all ran at finalize's last round.
void ParkWorker(Context* context) {
  struct Parked {
    ucp_context_h ucp;
    ucp_worker_h worker;
    std::unordered_set<Operation*> orphans;
  };
  static std::mutex mu;
  static auto* parked = new std::vector<Parked>;
  context->log(2, "UCX worker left to the process's exit: an endpoint's wireup with a lost peer "
                  "may be unfinished, and UCX before 1.14 aborts the process if it is destroyed "
                  "then (openucx/ucx#8175)");
  std::lock_guard lock(mu);
  parked->push_back({context->ucp, context->worker, std::move(context->orphans)});
}

int Init(const rdv_transport_init_params_t* params, rdv_transport_context_t* out,
         rdv_transport_error_t* error) {
  UcxSettings settings;
  if (const int code = ReadSettings(params, &settings, error); code != RDV_TRANSPORT_OK) {
    return code;
  }
  if (const int code = CheckSharedMemorySegments(settings, error); code != RDV_TRANSPORT_OK) {
    return code;
  }
  auto* context = new Context;
  context->log.Configure(params);
  context->log_route.emplace(&context->log);
  context->busy_poll = settings.busy_poll;
  context->spin = settings.spin;
  context->mapped_memory = settings.mapped_memory;
  context->segments_read_by_peer_copy = settings.segments_read_by_peer_copy;
  context->peer_failure_handling = settings.peer_failure_handling;
  context->preferred_op = settings.preferred_op;
  if (params != nullptr && (params->field_mask & RDV_TRANSPORT_INIT_FIELD_MESSAGES)) {
    context->on_message = params->on_message;
    context->on_message_user = params->on_message_user;
  }

  static std::once_flag handler_pushed;
  std::call_once(handler_pushed, [] {
    ucs_log_push_handler(RouteToHostLog);
  });
  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    delete context;
    return UcxError(error, status, "ucp_config_read (check the UCX_* variables)");
  }
  const std::string tuned = ApplyToConfig(
      settings, config, [context](const std::string& warning) { context->log(1, warning); });
  ucp_params_t ucp_params{};
  ucp_params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  ucp_params.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP;
  ucp_params.mt_workers_shared = 1;
  status = ucp_init(&ucp_params, config, &context->ucp);
  ucp_config_release(config);
  if (status != UCS_OK) {
    delete context;
    return UcxError(error, status, "ucp_init (check UCX_TLS / UCX_NET_DEVICES)");
  }
  ucp_worker_params_t worker_params{};
  worker_params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  worker_params.thread_mode = UCS_THREAD_MODE_MULTI;
  context->wireup_purge_asserts = WireupPurgeAsserts(context->ucp);
  status = ucp_worker_create(context->ucp, &worker_params, &context->worker);
  if (status == UCS_OK) status = ucp_worker_get_efd(context->worker, &context->event_fd);
  if (status == UCS_OK && context->on_message != nullptr) {
    ucp_am_handler_param_t handler{};
    handler.field_mask = UCP_AM_HANDLER_PARAM_FIELD_ID | UCP_AM_HANDLER_PARAM_FIELD_CB |
                         UCP_AM_HANDLER_PARAM_FIELD_ARG | UCP_AM_HANDLER_PARAM_FIELD_FLAGS;
    handler.id = kMessageAmId;
    handler.cb = OnMessage;
    handler.arg = context;
    handler.flags = UCP_AM_FLAG_WHOLE_MSG;
    status = ucp_worker_set_am_recv_handler(context->worker, &handler);
  }
  if (status != UCS_OK) {
    if (context->worker != nullptr) ucp_worker_destroy(context->worker);
    ucp_cleanup(context->ucp);
    delete context;
    return UcxError(error, status, "creating the worker");
  }
  ucp_context_attr_t attributes{};
  attributes.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
  context->cuda_memory = ucp_context_query(context->ucp, &attributes) == UCS_OK &&
                         (attributes.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)) != 0;
  context->description = std::string("UCX ") + ucp_get_version_string() + ", UCX_TLS=" +
                         (settings.tls.empty() ? "(default)" : settings.tls) + ", " +
                         (context->preferred_op == RDV_TRANSPORT_OP_TAG ? "tagged" : "get") +
                         ", progress " + (context->busy_poll ? "poll" : "wait") +
                         (context->spin.count() > 0 && !context->busy_poll
                              ? " after " + std::to_string(context->spin.count()) + " us polling"
                              : "") +
                         (context->cuda_memory ? ", CUDA memory" : ", host memory only") +
                         (context->mapped_memory ? ", mapped pool" : "") +
                         (context->segments_read_by_peer_copy ? " lent to be read" : "") + tuned;
  context->log(2, "UCX transport: " + context->description);
  context->progress = std::thread(ProgressLoop, context);
  *out = reinterpret_cast<rdv_transport_context_t>(context);
  return RDV_TRANSPORT_OK;
}

void Finalize(rdv_transport_context_t handle) {
  Context* context = ContextOf(handle);
  {
    // Closes flush what was sent; a peer that does not answer (a dead one
    // not noticed yet) is given up on.
    std::unique_lock lock(context->closing_mu);
    context->closed.wait_for(lock, std::chrono::seconds(2),
                             [&] { return context->closing.empty(); });
  }
  context->stop.store(true, std::memory_order_release);
  ucp_worker_signal(context->worker);
  context->progress.join();
  context->joined.store(true, std::memory_order_release);
  // Cancels and forced closes asked for after the last round, and the
  // callbacks of operations it completed.
  context->RunTasks();
  // No copy runs now: the peers' segments go.
  context->attachments.Clear();
  // No progress now, so no close callback either: release what is left,
  // as UCX requires before the worker goes.
  for (auto& [close, request] : context->closing) {
    if (request != nullptr) ucp_request_free(request);
    delete close->owned;
    delete close;
  }
  if (context->wireup_purge_asserts && context->unproven_closes.load() > 0) {
    ParkWorker(context);
  } else {
    // Destroying the worker purges what an aborted endpoint still had
    // pending (its wireup queue), running their callbacks: orphans among
    // them free themselves there, the rest after.
    {
      const WorkerTeardown teardown;
      ucp_worker_destroy(context->worker);
    }
    for (Operation* op : context->orphans) delete op;
    ucp_cleanup(context->ucp);
  }
  delete context;
}

int Query(rdv_transport_context_t handle, rdv_transport_attributes_t* attributes,
          rdv_transport_error_t*) {
  const Context* context = ContextOf(handle);
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_NAME) attributes->name = "ucx";
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_MEMORY_TYPES) {
    attributes->memory_types =
        RDV_TRANSPORT_MEMORY_HOST | (context->cuda_memory ? uint32_t{RDV_TRANSPORT_MEMORY_CUDA} : 0u);
  }
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_GPUDIRECT) {
    attributes->gpudirect = context->cuda_memory;
  }
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_OPS) {
    attributes->ops = RDV_TRANSPORT_OP_GET | RDV_TRANSPORT_OP_PUT | RDV_TRANSPORT_OP_TAG |
                      RDV_TRANSPORT_OP_MESSAGE;
    attributes->preferred_op = context->preferred_op;
  }
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_DESCRIPTION) {
    std::snprintf(attributes->description, sizeof(attributes->description), "%s",
                  context->description.c_str());
  }
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_MAX_MESSAGE) {
    attributes->max_message_bytes = kMaxMessageBytes;
  }
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_PEER_COPY_FROM) {
    attributes->peer_copy_from_bytes = context->segments_read_by_peer_copy ? kMinSegmentBytes : 0;
  }
  return RDV_TRANSPORT_OK;
}

int LocalAddress(rdv_transport_context_t handle, void* buffer, size_t* length,
                 rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  ucp_address_t* address = nullptr;
  size_t size = 0;
  const ucs_status_t status = ucp_worker_get_address(context->worker, &address, &size);
  if (status != UCS_OK) return UcxError(error, status, "ucp_worker_get_address");
  const std::string sealed = Seal(address, size);
  ucp_worker_release_address(context->worker, address);
  return CopyOut(sealed.data(), sealed.size(), buffer, length, error);
}

#ifdef RDV_UCX_ABI_V2_ONLY
// A build of this plugin as one written against the frozen v2 ABI, for the
// loader's fallback test: it lists no settings and takes none.
const rdv_transport_v2_t kTransport = {
    2, sizeof(rdv_transport_v2_t), "ucx", Init, Finalize, Query,
    LocalAddress, Connect, Disconnect, MemAlloc, MemRegister, MemRelease, MemPack,
    PostGet, PostPut, PostSend, PostRecv, Abort, CancelRecv,
};
#else
const rdv_transport_v3_t kTransport = {
    3, sizeof(rdv_transport_v3_t), "ucx", Init, Finalize, Query,
    LocalAddress, Connect, Disconnect, MemAlloc, MemRegister, MemRelease, MemPack,
    PostGet, PostPut, PostSend, PostRecv, Abort, CancelRecv, SettingsTable, PostMessage,
    MemQuery,
};
#endif

}  // namespace
}  // namespace rdv::ucx_plugin

#ifdef RDV_UCX_ABI_V2_ONLY
RDV_PLUGIN_EXPORT const rdv_transport_v2_t* rdv_transport_v2(void) {
  return &rdv::ucx_plugin::kTransport;
}
#else
RDV_PLUGIN_EXPORT const rdv_transport_v3_t* rdv_transport_v3(void) {
  return &rdv::ucx_plugin::kTransport;
}
#endif
