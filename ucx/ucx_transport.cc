// librdv_transport_ucx.so: rdv's transport ABI (plugin/rdv_transport.h) on
// UCX's UCP API. One context = one UCP context and worker, progressed by a
// dedicated thread that sleeps on the worker's event fd when idle
// (RDV_UCX_PROGRESS=poll keeps it spinning). Honours every UCX_* variable
// (UCX_TLS, UCX_NET_DEVICES, ...), read by ucp_config_read.
#include <poll.h>
#include <sys/mman.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"
#include "ucx/ucx_settings.h"

namespace {

using rdv::plugin_support::CopyOut;
using rdv::plugin_support::Seal;
using rdv::plugin_support::SetError;
using rdv::plugin_support::Unseal;
using rdv::ucx_plugin::ApplyTunedDefaults;
using rdv::ucx_plugin::CheckSharedMemorySegments;
using rdv::ucx_plugin::ReadPreferredOp;

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

struct Context;
struct Endpoint;
struct Operation;

// An endpoint's close in flight. A graceful close (disconnect) owns its
// endpoint and frees it when done; an abort's endpoint lives on until
// disconnect.
struct Close {
  Context* context = nullptr;
  Endpoint* owned = nullptr;
  void* request = nullptr;  // null until ucp_ep_close_nbx has returned it
};

struct Context {
  ucp_context_h ucp = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  bool busy_poll = false;
  std::atomic<bool> stop{false};
  std::thread progress;
  rdv_transport_log_fn log = nullptr;
  void* log_user = nullptr;
  int log_level = 1;
  uint32_t preferred_op = RDV_TRANSPORT_OP_GET;
  bool cuda_memory = false;  // this UCX build has a CUDA memory domain
  std::string description;
  // Closes still in flight.
  std::mutex closing_mu;
  std::condition_variable closed;
  std::unordered_map<Close*, void*> closing;  // closing_mu; Close -> its request
  // Tagged receives no send has completed yet, by tag, for cancel_recv.
  // Recursive: UCX may complete a receive inside ucp_tag_recv_nbx or
  // ucp_request_cancel, on the thread that holds it.
  std::recursive_mutex recvs_mu;
  std::unordered_map<uint64_t, Operation*> recvs;  // recvs_mu
  // Work for the progress thread: cancels and forced closes complete
  // operations inline, and callbacks run on the progress thread only.
  std::mutex tasks_mu;
  std::vector<std::function<void()>> tasks;  // tasks_mu
  std::atomic<bool> has_tasks{false};
  // Operations an abort completed while UCX still held them (progress
  // thread only): freed when UCX lets go, or at finalize.
  std::unordered_set<Operation*> orphans;

  void Log(int level, const std::string& message) const {
    if (log != nullptr && level <= log_level) log(log_user, level, message.c_str());
  }
  // Wakes the progress thread to pick up newly posted work.
  void Wake() const {
    if (!busy_poll) ucp_worker_signal(worker);
  }
  void RunOnProgressThread(std::function<void()> task) {
    {
      std::lock_guard lock(tasks_mu);
      tasks.push_back(std::move(task));
      has_tasks.store(true, std::memory_order_release);
    }
    ucp_worker_signal(worker);
  }
  void RunTasks() {
    if (!has_tasks.load(std::memory_order_acquire)) return;
    std::vector<std::function<void()>> taken;
    {
      std::lock_guard lock(tasks_mu);
      taken.swap(tasks);
      has_tasks.store(false, std::memory_order_relaxed);
    }
    for (auto& task : taken) task();
  }
};

// Unpacked remote keys of one endpoint, kept: unpacking a shared-memory key
// attaches the peer's segment, and attaching it anew for every transfer
// costs a page fault per page. Bounded; the oldest key goes first.
class RemoteKeyCache {
 public:
  static constexpr size_t kCapacity = 256;

  ~RemoteKeyCache() { Clear(); }

  // Before the endpoint closes: keys belong to it.
  void Clear() {
    std::lock_guard lock(mu_);
    for (auto& [bytes, rkey] : keys_) ucp_rkey_destroy(rkey);
    keys_.clear();
    order_.clear();
  }

  ucs_status_t Get(ucp_ep_h ep, const void* key, size_t length, ucp_rkey_h* rkey) {
    std::lock_guard lock(mu_);
    std::string bytes(static_cast<const char*>(key), length);
    if (auto it = keys_.find(bytes); it != keys_.end()) {
      *rkey = it->second;
      return UCS_OK;
    }
    const ucs_status_t status = ucp_ep_rkey_unpack(ep, key, rkey);
    if (status != UCS_OK) return status;
    if (order_.size() == kCapacity) {
      // In-flight operations on the evicted key completed long ago: a key is
      // only replaced after kCapacity newer ones.
      ucp_rkey_destroy(keys_[order_.front()]);
      keys_.erase(order_.front());
      order_.pop_front();
    }
    order_.push_back(bytes);
    keys_.emplace(std::move(bytes), *rkey);
    return UCS_OK;
  }

 private:
  std::mutex mu_;
  std::unordered_map<std::string, ucp_rkey_h> keys_;
  std::deque<std::string> order_;
};

struct Endpoint {
  Context* context = nullptr;
  // Posts hold use_mu while they use ep; abort takes it away (null after).
  // Recursive: UCX may complete an operation inside its post.
  std::recursive_mutex use_mu;
  ucp_ep_h ep = nullptr;
  // Never held across a call into UCX: completions take it inside UCX's
  // worker lock, which a post holding use_mu may be waiting for.
  std::mutex in_flight_mu;
  std::unordered_set<Operation*> in_flight;  // in_flight_mu: its posted operations
  std::atomic<ucs_status_t> failure{UCS_OK};
  RemoteKeyCache keys;
  // Reached through shared-memory transports only: their puts are in the
  // peer's memory when they complete (and a flush on them never completes
  // in UCX 1.13).
  bool shared_memory_only = false;
};

struct Memory {
  Context* context = nullptr;
  ucp_mem_h memh = nullptr;
  void* mapped = nullptr;  // what MemAlloc mapped, unmapped after the registration
  size_t mapped_length = 0;
};

// One posted operation, freed when its callback has run.
struct Operation {
  rdv_transport_completion_fn done;
  void* user;
  Context* context = nullptr;
  Endpoint* endpoint = nullptr;    // a get, put or send: tracked there until it ends
  bool orphaned = false;           // completed by an abort; UCX has not let go yet
  ucp_ep_h flush_after = nullptr;  // a put: flushed once locally complete
  Context* receiver = nullptr;     // a receive: its context, which tracks it
  uint64_t tag = 0;                // a receive: its tag
  void* request = nullptr;         // a receive: set once posted, under recvs_mu
};

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
  if (!Untrack(op)) return;
  if (status == UCS_OK) {
    op->done(op->user, RDV_TRANSPORT_OK, nullptr);
  } else {
    const std::string message = std::string("UCX transfer failed: ") + ucs_status_string(status);
    op->done(op->user, CodeOf(status), message.c_str());
  }
  delete op;
}

void OnSendDone(void* request, ucs_status_t status, void* user) {
  Complete(static_cast<Operation*>(user), status);
  ucp_request_free(request);
}

// A put's completion only frees the local buffer; the flush after it
// completes once the bytes are in the peer's memory.
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

void OnRecvDone(void* request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user) {
  auto* op = static_cast<Operation*>(user);
  {
    // Out of cancel_recv's reach before the request goes.
    std::lock_guard lock(op->receiver->recvs_mu);
    if (auto it = op->receiver->recvs.find(op->tag);
        it != op->receiver->recvs.end() && it->second == op) {
      op->receiver->recvs.erase(it);
    }
  }
  Complete(op, status);
  ucp_request_free(request);
}

void ProgressLoop(Context* context) {
  while (!context->stop.load(std::memory_order_acquire)) {
    context->RunTasks();
    if (ucp_worker_progress(context->worker) != 0 || context->busy_poll) continue;
    const ucs_status_t armed = ucp_worker_arm(context->worker);
    if (armed == UCS_ERR_BUSY) continue;
    if (armed != UCS_OK) {
      context->Log(0, std::string("ucp_worker_arm: ") + ucs_status_string(armed));
      continue;
    }
    pollfd wait{context->event_fd, POLLIN, 0};
    poll(&wait, 1, -1);  // ucp_worker_signal wakes it for new work and stop
  }
}

int Init(const rdv_transport_init_params_t* params, rdv_transport_context_t* out,
         rdv_transport_error_t* error) {
  auto* context = new Context;
  if (params != nullptr && (params->field_mask & RDV_TRANSPORT_INIT_FIELD_LOG)) {
    context->log = params->log;
    context->log_user = params->log_user;
  }
  if (params != nullptr && (params->field_mask & RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL)) {
    context->log_level = params->log_level;
  }
  const char* progress = std::getenv("RDV_UCX_PROGRESS");
  if (progress != nullptr && std::strcmp(progress, "poll") != 0 &&
      std::strcmp(progress, "wait") != 0) {
    delete context;
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "RDV_UCX_PROGRESS='%s': use 'wait' (default) or 'poll'", progress);
  }
  if (const int code = CheckSharedMemorySegments(error); code != RDV_TRANSPORT_OK) {
    delete context;
    return code;
  }
  context->busy_poll = progress != nullptr && std::strcmp(progress, "poll") == 0;
  if (!ReadPreferredOp(&context->preferred_op)) {
    delete context;
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "RDV_UCX_OP='%s': use 'auto' (default), 'get' or 'tag'",
                    std::getenv("RDV_UCX_OP"));
  }

  ucp_config_t* config = nullptr;
  ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
  if (status != UCS_OK) {
    delete context;
    return UcxError(error, status, "ucp_config_read (check the UCX_* variables)");
  }
  const std::string tuned = ApplyTunedDefaults(
      config, [context](const std::string& warning) { context->Log(1, warning); });
  ucp_params_t ucp_params{};
  ucp_params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
  ucp_params.features = UCP_FEATURE_RMA | UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
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
  status = ucp_worker_create(context->ucp, &worker_params, &context->worker);
  if (status == UCS_OK) status = ucp_worker_get_efd(context->worker, &context->event_fd);
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
  const char* tls = std::getenv("UCX_TLS");
  context->description = std::string("UCX ") + ucp_get_version_string() + ", UCX_TLS=" +
                         (tls ? tls : "(default)") + ", " +
                         (context->preferred_op == RDV_TRANSPORT_OP_TAG ? "tagged" : "get") +
                         ", progress " + (context->busy_poll ? "poll" : "wait") +
                         (context->cuda_memory ? ", CUDA memory" : ", host memory only") + tuned;
  context->Log(2, "UCX transport: " + context->description);
  context->progress = std::thread(ProgressLoop, context);
  *out = reinterpret_cast<rdv_transport_context_t>(context);
  return RDV_TRANSPORT_OK;
}

Context* ContextOf(rdv_transport_context_t handle) { return reinterpret_cast<Context*>(handle); }

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
  // Cancels and forced closes asked for after the last round.
  context->RunTasks();
  for (Operation* op : context->orphans) delete op;
  // No progress now, so no close callback either: release what is left,
  // as UCX requires before the worker goes.
  for (auto& [close, request] : context->closing) {
    if (request != nullptr) ucp_request_free(request);
    delete close->owned;
    delete close;
  }
  ucp_worker_destroy(context->worker);
  ucp_cleanup(context->ucp);
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
    attributes->ops = RDV_TRANSPORT_OP_GET | RDV_TRANSPORT_OP_PUT | RDV_TRANSPORT_OP_TAG;
    attributes->preferred_op = context->preferred_op;
  }
  if (attributes->field_mask & RDV_TRANSPORT_ATTR_FIELD_DESCRIPTION) {
    std::snprintf(attributes->description, sizeof(attributes->description), "%s",
                  context->description.c_str());
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

void OnEndpointError(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* endpoint = static_cast<Endpoint*>(arg);
  endpoint->failure.store(status, std::memory_order_release);
  endpoint->context->Log(1, std::string("UCX endpoint failed: ") + ucs_status_string(status));
}

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
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.address = static_cast<const ucp_address_t*>(peer_address);
  params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = OnEndpointError;
  params.err_handler.arg = endpoint;
  ucs_status_t status = ucp_ep_create(context->worker, &params, &endpoint->ep);
  if (status == UCS_ERR_UNREACHABLE) {
    // UCX 1.13's shared-memory transports cannot report a lost peer; rdv
    // then learns of it from the control plane (gRPC keepalive) instead.
    params.field_mask &= ~uint64_t{UCP_EP_PARAM_FIELD_ERR_HANDLER};
    params.err_mode = UCP_ERR_HANDLING_MODE_NONE;
    status = ucp_ep_create(context->worker, &params, &endpoint->ep);
    endpoint->shared_memory_only = true;
    if (status == UCS_OK) {
      context->Log(2, "UCX endpoint without peer-failure handling (transports lack it)");
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

void CloseDone(Close* close) {
  Context* context = close->context;
  {
    std::lock_guard lock(context->closing_mu);
    context->closing.erase(close);
    if (context->closing.empty()) context->closed.notify_all();
  }
  delete close->owned;
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

// Closes gracefully: a forced close leaves the peer's side of a tcp
// connection half alive, and a later endpoint between the same two workers
// then lost puts silently. The endpoint (its error handler's argument)
// lives until the close is done.
void Disconnect(rdv_transport_endpoint_t handle) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  Context* context = endpoint->context;
  endpoint->keys.Clear();
  if (endpoint->ep == nullptr) {
    // Aborted: nothing left to close, once the abort has run.
    endpoint->context->RunOnProgressThread([endpoint] { delete endpoint; });
    return;
  }
  StartClose(endpoint->ep, new Close{context, endpoint}, 0);
}

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
    op->orphaned = true;
    op->endpoint = nullptr;
    context->orphans.insert(op);
    op->done(op->user, RDV_TRANSPORT_CANCELLED,
             "UCX: the transfer was abandoned: its endpoint was aborted (the peer was lost)");
  }
}

void Abort(rdv_transport_endpoint_t handle) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  ucp_ep_h ep = nullptr;
  {
    std::lock_guard lock(endpoint->use_mu);
    ep = std::exchange(endpoint->ep, nullptr);
    if (ep == nullptr) return;
    endpoint->failure.store(UCS_ERR_CANCELED, std::memory_order_release);
    endpoint->keys.Clear();  // keys belong to the endpoint's ep
  }
  Context* context = endpoint->context;
  context->Log(1, "UCX endpoint aborted: its peer was lost");
  context->RunOnProgressThread([endpoint, ep] { ForceClose(endpoint, ep); });
}

int MapMemory(Context* context, ucp_mem_map_params_t* params, rdv_transport_memory_t* out,
              rdv_transport_error_t* error, const char* what) {
  auto* memory = new Memory;
  memory->context = context;
  const ucs_status_t status = ucp_mem_map(context->ucp, params, &memory->memh);
  if (status != UCS_OK) {
    delete memory;
    return SetError(error, CodeOf(status), "UCX %s of %zu bytes: %s (check `ulimit -l`)", what,
                    params->length, ucs_status_string(status));
  }
  *out = reinterpret_cast<rdv_transport_memory_t>(memory);
  return RDV_TRANSPORT_OK;
}

constexpr size_t kHugePageBytes = size_t{2} << 20;

// Plain anonymous memory, registered, rather than UCX's own allocation
// (UCP_MEM_MAP_ALLOCATE), which comes from a shared-memory segment: a
// consumer on the same host maps such a segment and reads it in place, so
// each GiB it receives also added a GiB of the producer's pages to its peak
// RSS. A get of anonymous memory travels as shared-memory active messages
// instead (kTunedDefaults), at no RSS cost and faster here, both processes
// copying at once.
int MemAlloc(rdv_transport_context_t handle, size_t length, rdv_transport_memory_t* out,
             void** address, rdv_transport_error_t* error) {
  void* mapped = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) {
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "mmap of %zu bytes: %s", length,
                    std::strerror(errno));
  }
  // Huge pages where the kernel gives them on request: fewer pages for the
  // copies to walk (64 MiB moves about 6% faster here).
  if (length >= kHugePageBytes) madvise(mapped, length, MADV_HUGEPAGE);
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
  params.address = mapped;
  params.length = length;
  rdv_transport_memory_t memory = nullptr;
  const int code = MapMemory(ContextOf(handle), &params, &memory, error, "registration");
  if (code != RDV_TRANSPORT_OK) {
    munmap(mapped, length);
    return code;
  }
  reinterpret_cast<Memory*>(memory)->mapped = mapped;
  reinterpret_cast<Memory*>(memory)->mapped_length = length;
  *out = memory;
  *address = mapped;
  return RDV_TRANSPORT_OK;
}

int MemRegister(rdv_transport_context_t handle, void* address, size_t length,
                uint32_t memory_type, int, rdv_transport_memory_t* out,
                rdv_transport_error_t* error) {
  const bool cuda = memory_type == RDV_TRANSPORT_MEMORY_CUDA;
  if (cuda && !ContextOf(handle)->cuda_memory) {
    return SetError(error, RDV_TRANSPORT_FAILED_PRECONDITION,
                    "this UCX build has no CUDA support (ucx_info -d lists no cuda memory "
                    "domain); stage GPU memory through host memory");
  }
  if (!cuda && memory_type != RDV_TRANSPORT_MEMORY_HOST) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT, "unknown memory type %u", memory_type);
  }
  ucp_mem_map_params_t params{};
  params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH |
                      UCP_MEM_MAP_PARAM_FIELD_MEMORY_TYPE;
  params.address = address;
  params.length = length;
  params.memory_type = cuda ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST;
  return MapMemory(ContextOf(handle), &params, out, error, "registration");
}

void MemRelease(rdv_transport_memory_t handle) {
  auto* memory = reinterpret_cast<Memory*>(handle);
  ucp_mem_unmap(memory->context->ucp, memory->memh);
  if (memory->mapped != nullptr) munmap(memory->mapped, memory->mapped_length);
  delete memory;
}

int MemPack(rdv_transport_memory_t handle, void* buffer, size_t* length,
            rdv_transport_error_t* error) {
  auto* memory = reinterpret_cast<Memory*>(handle);
  void* key = nullptr;
  size_t size = 0;
  const ucs_status_t status = ucp_rkey_pack(memory->context->ucp, memory->memh, &key, &size);
  if (status != UCS_OK) return UcxError(error, status, "ucp_rkey_pack");
  const std::string packed = Seal(key, size);
  ucp_rkey_buffer_release(key);
  return CopyOut(packed.data(), packed.size(), buffer, length, error);
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
    std::lock_guard lock(endpoint->in_flight_mu);
    endpoint->in_flight.insert(op);
  }
  const ucs_status_ptr_t request = start();
  if (UCS_PTR_IS_ERR(request)) {
    if (endpoint != nullptr) {
      std::lock_guard lock(endpoint->in_flight_mu);
      endpoint->in_flight.erase(op);
    }
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

template <bool kGet>
int PostRma(rdv_transport_endpoint_t handle, void* local, uint64_t remote_address,
            const void* remote_key, size_t remote_key_length, size_t length,
            rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error) {
  auto* endpoint = reinterpret_cast<Endpoint*>(handle);
  size_t key_length = 0;
  const void* key = Unseal(remote_key, remote_key_length, &key_length);
  if (key == nullptr) {
    return SetError(error, RDV_TRANSPORT_INVALID_ARGUMENT,
                    "the peer's memory descriptor is not a UCX key packed by rdv (%zu bytes, "
                    "truncated or corrupted)", remote_key_length);
  }
  std::lock_guard lock(endpoint->use_mu);
  if (endpoint->ep == nullptr) return Aborted(error);
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
    if (!endpoint->shared_memory_only) {
      op->flush_after = endpoint->ep;
      param.cb.send = OnPutDone;
    }
    return ucp_put_nbx(endpoint->ep, local, length, remote_address, rkey, &param);
  }, error, kGet ? "ucp_get_nbx" : "ucp_put_nbx");
}

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
  std::lock_guard lock(context->recvs_mu);
  context->recvs.insert_or_assign(tag, op);
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
  auto it = context->recvs.find(tag);
  if (code != RDV_TRANSPORT_OK) {
    if (it != context->recvs.end() && it->second == op) context->recvs.erase(it);
    return code;
  }
  if (it != context->recvs.end() && it->second == op) op->request = posted;
  return code;
}

// On the progress thread, where the cancelled receive's callback then
// runs; under recvs_mu, which also stands between a completion and the
// request's release: the request is still UCX's when cancelled.
void CancelWaitingRecv(Context* context, uint64_t tag) {
  std::lock_guard lock(context->recvs_mu);
  auto it = context->recvs.find(tag);
  if (it != context->recvs.end() && it->second->request != nullptr) {
    ucp_request_cancel(context->worker, it->second->request);
  }
}

int CancelRecv(rdv_transport_context_t handle, uint64_t tag, rdv_transport_error_t* error) {
  Context* context = ContextOf(handle);
  {
    std::lock_guard lock(context->recvs_mu);
    auto it = context->recvs.find(tag);
    if (it == context->recvs.end() || it->second->request == nullptr) {
      return SetError(error, RDV_TRANSPORT_NOT_FOUND, "no tagged receive waits under tag %llu",
                      static_cast<unsigned long long>(tag));
    }
  }
  context->RunOnProgressThread([context, tag] { CancelWaitingRecv(context, tag); });
  return RDV_TRANSPORT_OK;
}

const rdv_transport_v2_t kTransport = {
    RDV_TRANSPORT_ABI_VERSION, sizeof(rdv_transport_v2_t), "ucx", Init, Finalize, Query,
    LocalAddress, Connect, Disconnect, MemAlloc, MemRegister, MemRelease, MemPack,
    PostGet, PostPut, PostSend, PostRecv, Abort, CancelRecv,
};

}  // namespace

RDV_PLUGIN_EXPORT const rdv_transport_v2_t* rdv_transport_v2(void) { return &kTransport; }
