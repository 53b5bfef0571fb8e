// The UCX plugin's shared state: a context (one UCP context and worker and
// its progress thread), endpoints, posted operations and mapped memory, and
// what each part of the plugin offers the others. The parts:
// ucx_settings.cc (the environment), ucx_endpoints.cc (connect, disconnect,
// abort), ucx_transfers.cc (get, put, tagged send and receive, and their
// completions), ucx_shared_memory.cc (memory `mapped`: System V segments
// and peers' attachments), ucx_log.cc (UCX's own lines to the host's
// logger) and ucx_transport.cc (init, progress, memory, the ABI table).
#pragma once

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "plugin/plugin_support.h"
#include "plugin/rdv_transport.h"
#include "core/split_copy.h"
#include "ucx/ucx_log.h"
#include "ucx/ucx_shared_memory.h"

namespace rdv::ucx_plugin {

// The RDV_TRANSPORT_* code for a UCX status.
int CodeOf(ucs_status_t status);
// Sets `error` to "UCX <what>: <status>"; returns the code.
int UcxError(rdv_transport_error_t* error, ucs_status_t status, const char* what);

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

// The active message id of post_message, and the longest message: eager, so
// it arrives whole in the receiver's callback.
constexpr unsigned kMessageAmId = 0;
constexpr size_t kMaxMessageBytes = 4096;

struct Context {
  ucp_context_h ucp = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  bool busy_poll = false;
  std::chrono::microseconds spin{0};  // UcxSettings::spin
  bool mapped_memory = false;         // UcxSettings::mapped_memory
  bool segments_read_by_peer_copy = false;  // UcxSettings::segments_read_by_peer_copy
  Attachments attachments;            // peers' segments copied through
  SplitCopier copier;                 // copies through them
  std::atomic<int> segments{0};       // this context's live segments
  std::atomic<bool> segments_short{false};  // a segment was refused: logged once
  bool peer_failure_handling = true;  // UcxSettings::peer_failure_handling
  // UCX before 1.14 with a UD transport open: destroying the worker while
  // an endpoint to a lost peer has its wireup request still queued on a UD
  // lane fails an assertion and aborts the process (openucx/ucx#8175).
  bool wireup_purge_asserts = false;
  // Endpoints closed or aborted before any operation on them succeeded:
  // their wireup may never have finished (a peer lost early).
  std::atomic<int> unproven_closes{0};
  std::atomic<bool> stop{false};
  std::thread progress;
  plugin_support::PluginLog log;  // the host's logger
  std::optional<LogRoute> log_route;  // UCX's own lines through `log`, once configured
  rdv_transport_message_fn on_message = nullptr;  // null: messages are not taken
  void* on_message_user = nullptr;
  uint32_t preferred_op = RDV_TRANSPORT_OP_GET;
  bool cuda_memory = false;  // this UCX build has a CUDA memory domain
  std::string description;
  // Closes still in flight.
  std::mutex closing_mu;
  std::condition_variable closed;
  std::unordered_map<Close*, void*> closing;  // closing_mu; Close -> its request
  // Tagged receives no send has completed yet, by tag, for cancel_recv.
  // Never held across a call into UCX: a receive completes inside UCX's
  // worker lock (in progress, or inside the post that matched a message
  // already there), and takes recvs_mu there to leave this table.
  struct WaitingRecv {
    Operation* op = nullptr;  // compared only: it may be gone once the entry is
    void* request = nullptr;  // UCX's, null until the post returned it
  };
  std::mutex recvs_mu;
  std::unordered_map<uint64_t, WaitingRecv> recvs;  // recvs_mu
  // Work for the progress thread: cancels and forced closes complete
  // operations inline, and callbacks run on the progress thread only.
  plugin_support::ProgressQueue<std::function<void()>> tasks;
  // Operations this context started (gets, puts, sends, messages) that
  // have not ended. While any has, the progress thread sleeps at most 1 ms
  // at a time (else kIdleWaitMs): UCX 1.13 does not wake a worker whose
  // sends wait in a queue (a full shared-memory FIFO, an endpoint's
  // wireup), and they would wait for the next unrelated event.
  std::atomic<int64_t> started{0};
  // Operations an abort completed while UCX still held them (progress
  // thread only): freed when UCX lets go, or at finalize.
  std::unordered_set<Operation*> orphans;

  // Completions (the host's callbacks) waiting for ucp_worker_progress to
  // return: progress thread only. The host may post from a callback, which
  // takes an endpoint's use_mu; inside UCX's worker lock that would invert
  // the order a post on another thread takes them in (a deadlock, seen).
  std::vector<std::function<void()>> completions;
  // Set once the progress thread has been joined (finalize): callbacks
  // then run where UCX calls them, since nothing else would run them.
  std::atomic<bool> joined{false};
  // The progress thread's id, which it sets first thing.
  std::atomic<std::thread::id> progress_id{};

  // Posts inside UCX now (PostingScope). UCX's worker lock is a spinlock:
  // a progress thread that spins on it while a poster on another thread,
  // preempted on the same CPU, holds it burns its whole time slice (3-5 ms
  // here, with the process pinned to one CPU). The progress thread yields
  // instead while a post is under way.
  std::atomic<int> posting{0};
  // Whether no post is inside UCX, or the ones that are leave within a few
  // microseconds, as a post that runs does. One that takes longer was
  // preempted holding the lock: the progress thread yields to it.
  bool PostsEndSoon() const {
    constexpr auto kPostTakesAtMost = std::chrono::microseconds(20);
    if (posting.load(std::memory_order_acquire) == 0) return true;
    const auto give_up = std::chrono::steady_clock::now() + kPostTakesAtMost;
    while (posting.load(std::memory_order_acquire) > 0) {
      if (std::chrono::steady_clock::now() > give_up) return false;
    }
    return true;
  }

  // Set by the progress thread from just before its last look for work
  // until it wakes (ProgressLoop): only then does a post need to signal it.
  std::atomic<bool> sleeping{false};

  // Wakes the progress thread to pick up work a post left to it. Not
  // needed on that thread (it progresses again before it sleeps), nor while
  // it polls: signalling costs a system call per post, and a spurious
  // wake-up of the other side's thread, on the latency path of every
  // small transfer.
  void Wake() const {
    if (busy_poll || std::this_thread::get_id() == progress_id.load(std::memory_order_acquire)) {
      return;
    }
    // seq_cst, paired with ProgressLoop's store: either this sees it
    // asleep, or its look for work comes after this post.
    if (sleeping.load(std::memory_order_seq_cst)) ucp_worker_signal(worker);
  }
  // Signals only a sleeping progress thread, as Wake: a message whose send
  // completes inside the post queues its callback here, once per fast-path
  // Recv, and a signal each time cost a system call and woke the thread.
  void RunOnProgressThread(std::function<void()> task) {
    // The push and this load are seq_cst, paired with ProgressLoop's store
    // and its look at the queue: either this sees it asleep, or its last
    // look before sleeping finds this task.
    tasks.Push(std::move(task));
    if (sleeping.load(std::memory_order_seq_cst)) ucp_worker_signal(worker);
  }
  // Runs `callback` on the progress thread outside UCX's calls.
  void Deliver(std::function<void()> callback) {
    if (joined.load(std::memory_order_acquire)) {
      callback();
    } else if (std::this_thread::get_id() == progress_id.load(std::memory_order_acquire)) {
      completions.push_back(std::move(callback));
    } else {
      RunOnProgressThread(std::move(callback));
    }
  }
  // On the progress thread (or at finalize, once it is joined).
  void RunTasks() {
    for (auto& task : tasks.Take()) task();
    while (!completions.empty()) {
      std::vector<std::function<void()>> ready;
      ready.swap(completions);
      for (auto& callback : ready) callback();
    }
  }
};

// What MemPack seals: the region the key reaches, then UCX's packed key. A
// get or put outside the region is refused before UCX sees it (UCX would
// serve it at any address: a crash of the producer over shared memory or
// tcp, or of the consumer copying through a mapping).
struct KeyRegion {
  uint64_t address;
  uint64_t length;
  // Memory `mapped`: the System V segment holding the region, which a peer
  // in the same IPC scope copies through (ucx_shared_memory.h); -1 else.
  int32_t segment_id;
  uint32_t reserved;
  IpcScope scope;
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

// Marks a post into UCX's worker for as long as it lasts (Context::posting);
// on the progress thread itself it changes nothing.
class PostingScope {
 public:
  explicit PostingScope(Context* context) : context_(context) {
    context_->posting.fetch_add(1, std::memory_order_acq_rel);
  }
  ~PostingScope() { context_->posting.fetch_sub(1, std::memory_order_release); }
  PostingScope(const PostingScope&) = delete;
  PostingScope& operator=(const PostingScope&) = delete;

 private:
  Context* const context_;
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
  // An operation on it succeeded, so its wireup with the peer finished.
  std::atomic<bool> proven{false};
  RemoteKeyCache keys;
};

struct Memory {
  Context* context = nullptr;
  ucp_mem_h memh = nullptr;
  void* mapped = nullptr;  // what MemAlloc mapped, unmapped after the registration
  size_t mapped_length = 0;
  SharedSegment segment;  // memory `mapped`: freed after the registration
};

// One posted operation, freed when its callback has run.
struct Operation {
  rdv_transport_completion_fn done;
  void* user;
  Context* context = nullptr;
  Endpoint* endpoint = nullptr;    // a get, put or send: tracked there until it ends
  bool orphaned = false;           // completed by an abort; UCX has not let go yet
  bool started = false;            // counted in its context's `started`
  ucp_ep_h flush_after = nullptr;  // a put: flushed once locally complete
  Context* receiver = nullptr;     // a receive: its context, which tracks it
  uint64_t tag = 0;                // a receive: its tag
  std::string message{};           // a message: its bytes, until UCX has sent them
};

inline Context* ContextOf(rdv_transport_context_t handle) {
  return reinterpret_cast<Context*>(handle);
}

// The operation has ended for rdv: it no longer counts as started.
inline void Ended(Operation* op) {
  if (!op->started) return;
  op->started = false;
  op->context->started.fetch_sub(1, std::memory_order_release);
}

// ucx_endpoints.cc: the ABI's connect, disconnect and abort.
int Connect(rdv_transport_context_t handle, const void* sealed_address, size_t length,
            rdv_transport_endpoint_t* out, rdv_transport_error_t* error);
void Disconnect(rdv_transport_endpoint_t handle);
void Abort(rdv_transport_endpoint_t handle);

// ucx_memory.cc: the ABI's mem_* functions.
int MemAlloc(rdv_transport_context_t handle, size_t length, rdv_transport_memory_t* out,
             void** address, rdv_transport_error_t* error);
int MemRegister(rdv_transport_context_t handle, void* address, size_t length,
                uint32_t memory_type, int device, rdv_transport_memory_t* out,
                rdv_transport_error_t* error);
void MemRelease(rdv_transport_memory_t handle);
int MemPack(rdv_transport_memory_t handle, void* buffer, size_t* length,
            rdv_transport_error_t* error);
int MemQuery(rdv_transport_memory_t handle, rdv_transport_memory_attributes_t* attributes,
             rdv_transport_error_t* error);

// ucx_transfers.cc: the ABI's posts, cancel_recv and messages.
int PostGet(rdv_transport_endpoint_t endpoint, void* local, rdv_transport_memory_t,
            uint64_t remote_address, const void* remote_key, size_t remote_key_length,
            size_t length, rdv_transport_completion_fn done, void* user,
            rdv_transport_error_t* error);
int PostPut(rdv_transport_endpoint_t endpoint, const void* local, rdv_transport_memory_t,
            uint64_t remote_address, const void* remote_key, size_t remote_key_length,
            size_t length, rdv_transport_completion_fn done, void* user,
            rdv_transport_error_t* error);
int PostSend(rdv_transport_endpoint_t handle, const void* local, rdv_transport_memory_t,
             size_t length, uint64_t tag, rdv_transport_completion_fn done, void* user,
             rdv_transport_error_t* error);
int PostRecv(rdv_transport_context_t handle, void* local, rdv_transport_memory_t, size_t length,
             uint64_t tag, rdv_transport_completion_fn done, void* user,
             rdv_transport_error_t* error);
int CancelRecv(rdv_transport_context_t handle, uint64_t tag, rdv_transport_error_t* error);
int PostMessage(rdv_transport_endpoint_t handle, const void* message, size_t length,
                rdv_transport_completion_fn done, void* user, rdv_transport_error_t* error);
// The receive handler of post_message's active messages.
ucs_status_t OnMessage(void* arg, const void* header, size_t header_length, void* data,
                       size_t length, const ucp_am_recv_param_t* param);

}  // namespace rdv::ucx_plugin
