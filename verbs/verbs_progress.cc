// Transfers and progress: posting work requests within the QP's credits,
// completions, and the progress thread that runs every callback.
#include "verbs/verbs_context.h"

#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>

#include "plugin/plugin_support.h"

namespace rdv::verbs {

using plugin_support::SetError;

namespace {

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

}  // namespace

namespace {

// Hands the QP the next piece of `op`: a chunk of an RDMA operation, or a
// message whole from a send slot. Caller holds endpoint->mu.
int PostNext(Endpoint* endpoint, Operation* op) {
  ibv_sge sge{};
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = reinterpret_cast<uint64_t>(op);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op->opcode;
  wr.send_flags = IBV_SEND_SIGNALED;
  size_t length;
  if (op->opcode == IBV_WR_SEND) {
    length = op->payload.size();
    op->slot = endpoint->free_send_slots.back();
    char* slot = endpoint->send_slots + op->slot * kMaxMessageBytes;
    std::memcpy(slot, op->payload.data(), length);
    sge = {reinterpret_cast<uint64_t>(slot), static_cast<uint32_t>(length),
           endpoint->send_slots_mr->lkey};
  } else {
    length = std::min(endpoint->context->settings.chunk_bytes, op->length - op->posted);
    sge = {reinterpret_cast<uint64_t>(op->local + op->posted), static_cast<uint32_t>(length),
           op->lkey};
    wr.wr.rdma.remote_addr = op->remote + op->posted;
    wr.wr.rdma.rkey = op->rkey;
  }
  if (int err = ibv_post_send(endpoint->qp, &wr, &bad)) {
    op->slot = -1;
    return err;
  }
  if (op->slot >= 0) endpoint->free_send_slots.pop_back();
  op->posted += length;
  return 0;
}

}  // namespace

// Posts what the QP has room for; returns operations that are over.
// Caller holds endpoint->mu.
void PumpLocked(Endpoint* endpoint, std::vector<Operation*>* over) {
  while (!endpoint->waiting.empty() && (endpoint->credits > 0 || !endpoint->broken.empty())) {
    Operation* op = endpoint->waiting.front();
    if (!endpoint->broken.empty()) {
      Fail(op, endpoint->cancelling() ? RDV_TRANSPORT_CANCELLED : RDV_TRANSPORT_UNAVAILABLE,
           "verbs: the queue pair is out of service: " + endpoint->broken);
    } else if (int err = PostNext(endpoint, op)) {
      endpoint->broken = std::string("ibv_post_send: ") + std::strerror(err);
      Fail(op, RDV_TRANSPORT_UNAVAILABLE, "verbs: " + endpoint->broken);
    } else {
      ++op->outstanding;
      --endpoint->credits;
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
  FreeSendSlots(endpoint);
  delete endpoint;
  std::lock_guard lock(context->endpoints_mu);
  if (--context->live_endpoints == 0) context->endpoints_gone.notify_all();
}

bool IdleAndClosing(Endpoint* endpoint) {
  return endpoint->closing && endpoint->waiting.empty() &&
         endpoint->credits == endpoint->context->settings.queue_depth;
}

namespace {

void CompleteAll(const std::vector<Operation*>& over) {
  for (Operation* op : over) {
    op->done(op->user, op->code, op->code == RDV_TRANSPORT_OK ? nullptr : op->message.c_str());
    delete op;
  }
}

// A peer whose process dies loses its memory registrations and its queue
// pair at about the same time: a transfer in flight then fails with a
// remote access error, not a retry error. The dead process' connection
// socket closes with them, which tells the two apart; this waits briefly
// for that close (only on this error path).
bool PeerWentAway(int socket) {
  if (socket < 0) return false;
  pollfd ready{socket, POLLIN | POLLRDHUP, 0};
  if (poll(&ready, 1, kPeerCloseWaitMs) != 1) return false;
  char byte;
  return recv(socket, &byte, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;  // the peer never sends more
}

std::string CompletionMessage(const Operation& op, const ibv_wc& wc, int code, bool peer_gone) {
  const char* why = peer_gone ? " (the peer went away: its connection closed)"
                    : wc.status == IBV_WC_REM_ACCESS_ERR
                        ? " (the remote key or address does not cover the peer's memory)"
                    : wc.status == IBV_WC_RETRY_EXC_ERR ? " (the peer stopped answering)"
                                                        : "";
  const char* what = op.opcode == IBV_WR_RDMA_READ    ? "RDMA READ"
                     : op.opcode == IBV_WR_RDMA_WRITE ? "RDMA WRITE"
                                                      : "message SEND";
  return std::string("verbs: ") + what + " " + CompletionCodeName(code) + ": " +
         ibv_wc_status_str(wc.status) + why;
}

void OnCompletion(const ibv_wc& wc) {
  auto* op = reinterpret_cast<Operation*>(wc.wr_id);
  Endpoint* endpoint = op->endpoint;
  // Before the endpoint's lock: it may wait.
  const bool peer_gone =
      (wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR) &&
      PeerWentAway(endpoint->socket);
  std::vector<Operation*> over;
  bool destroy = false;
  {
    std::lock_guard lock(endpoint->mu);
    ++endpoint->credits;
    --op->outstanding;
    if (op->slot >= 0) {
      endpoint->free_send_slots.push_back(op->slot);
      op->slot = -1;
    }
    if (wc.status != IBV_WC_SUCCESS) {
      const bool first = endpoint->broken.empty();
      if (first) {
        endpoint->broken = std::string(ibv_wc_status_str(wc.status)) + " (vendor error " +
                           std::to_string(wc.vendor_err) + ")";
      }
      const int code = peer_gone ? RDV_TRANSPORT_UNAVAILABLE
                                 : CodeOfCompletion(wc.status, endpoint->cancelling());
      Fail(op, code, CompletionMessage(*op, wc, code, peer_gone));
    }
    if (!op->queued && op->outstanding == 0) over.push_back(op);
    PumpLocked(endpoint, &over);
    destroy = IdleAndClosing(endpoint);
  }
  CompleteAll(over);
  if (destroy) DestroyEndpoint(endpoint);
}

}  // namespace

// Hands operations that ended outside the progress thread to it: callbacks
// run there and nowhere else.
void Defer(Context* context, const std::vector<Operation*>& over) {
  if (over.empty()) return;
  context->deferred.PushAll(over);
  const uint64_t one = 1;
  (void)!write(context->kick, &one, sizeof(one));
}

namespace {

void RunDeferred(Context* context) {
  if (!context->deferred.Pending()) return;
  // Read before taking: a push after the read kicks the next round.
  uint64_t count;
  (void)!read(context->kick, &count, sizeof(count));
  CompleteAll(context->deferred.Take());
}

// Whether there was any completion.
bool DrainCq(Context* context) {
  ibv_wc completions[32];
  int count;
  bool any = false;
  while ((count = ibv_poll_cq(context->cq, 32, completions)) > 0) {
    any = true;
    for (int i = 0; i < count; ++i) {
      if (completions[i].wr_id & kReceiveWrId) {
        OnReceive(context, completions[i]);
      } else {
        OnCompletion(completions[i]);
      }
    }
  }
  return any;
}

// Polls while completions come, and for `idle` after the last one, then
// returns (never, for progress poll). A thread that waits on this CPU (a
// Recv's caller, spinning before it sleeps) runs between empty polls, not
// after this thread's time slice. With progress wait, a reply that lands
// within the spin costs no wake-up, nor the completion event's read, ack
// and re-arm.
void PollUntilIdleFor(Context* context, std::chrono::nanoseconds idle) {
  auto last_work = std::chrono::steady_clock::now();
  while (!context->stop.load(std::memory_order_relaxed)) {
    const bool completed = DrainCq(context);
    RunDeferred(context);
    const auto now = std::chrono::steady_clock::now();
    if (completed) {
      last_work = now;
    } else if (now - last_work >= idle) {
      return;
    } else {
      sched_yield();
    }
  }
}

}  // namespace

void ProgressLoop(Context* context) {
  if (context->settings.busy_poll) {
    PollUntilIdleFor(context, std::chrono::nanoseconds::max());
    return;
  }
  ibv_req_notify_cq(context->cq, 0);
  // A completion that landed before the CQ was armed raises no event: work
  // posted right after Init can finish before this thread first runs.
  DrainCq(context);
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
    // the next poll instead of waiting for the one after it. An event that
    // only tells of completions the spin already took finds none here, and
    // starts no spin.
    ibv_req_notify_cq(cq, 0);
    if (DrainCq(context)) PollUntilIdleFor(context, context->settings.spin);
  }
}

}  // namespace rdv::verbs
