// Messages (ABI v3 post_message): SEND/RECV of small messages. Every QP of
// a context takes its receives from one shared receive queue of
// kReceiveSlots slots, so memory does not grow with peers; each endpoint
// sends from queue_depth registered slots of its own, made at its first
// message.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "plugin/plugin_support.h"
#include "verbs/verbs_context.h"

namespace rdv::verbs {

using plugin_support::SetError;

namespace {

char* AllocateSlots(size_t count) {
  void* memory = nullptr;
  if (posix_memalign(&memory, 4096, count * kMaxMessageBytes) != 0) return nullptr;
  return static_cast<char*>(memory);
}

int ReceiveSlotCount(const Context* context) {
  return std::min(kReceiveSlots, context->device_attr.max_srq_wr);
}

bool PostReceive(Context* context, int slot) {
  ibv_sge sge{reinterpret_cast<uint64_t>(context->receive_slots + slot * kMaxMessageBytes),
              static_cast<uint32_t>(kMaxMessageBytes), context->receive_slots_mr->lkey};
  ibv_recv_wr wr{};
  ibv_recv_wr* bad = nullptr;
  wr.wr_id = kReceiveWrId | static_cast<uint64_t>(slot);
  wr.sg_list = &sge;
  wr.num_sge = 1;
  return ibv_post_srq_recv(context->srq, &wr, &bad) == 0;
}

}  // namespace

int StartMessages(Context* context, rdv_transport_error_t* error) {
  if (context->device_attr.max_srq == 0 || context->device_attr.max_srq_wr <= 0) {
    context->log(2, "the device has no shared receive queue: messages are not offered, and the "
                    "fast path keeps to the control plane");
    return RDV_TRANSPORT_OK;
  }
  const int slots = ReceiveSlotCount(context);
  ibv_srq_init_attr init{};
  init.attr.max_wr = static_cast<uint32_t>(slots);
  init.attr.max_sge = 1;
  context->srq = ibv_create_srq(context->pd, &init);
  if (context->srq == nullptr) return ErrnoError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED,
                                                 "shared receive queue", errno);
  context->receive_slots = AllocateSlots(slots);
  if (context->receive_slots != nullptr) {
    context->receive_slots_mr = ibv_reg_mr(context->pd, context->receive_slots,
                                           slots * kMaxMessageBytes, IBV_ACCESS_LOCAL_WRITE);
  }
  if (context->receive_slots_mr == nullptr) {
    return ErrnoError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "message receive slots", errno);
  }
  for (int slot = 0; slot < slots; ++slot) {
    if (!PostReceive(context, slot)) {
      return ErrnoError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED, "posting a receive slot", errno);
    }
  }
  return RDV_TRANSPORT_OK;
}

// After every QP is gone: nothing uses the queue any more.
void StopMessages(Context* context) {
  if (context->srq != nullptr) ibv_destroy_srq(context->srq);
  if (context->receive_slots_mr != nullptr) ibv_dereg_mr(context->receive_slots_mr);
  std::free(context->receive_slots);
}

void OnReceive(Context* context, const ibv_wc& wc) {
  const int slot = static_cast<int>(wc.wr_id & ~kReceiveWrId);
  if (wc.status == IBV_WC_SUCCESS && context->on_message != nullptr) {
    context->on_message(context->on_message_user, context->receive_slots + slot * kMaxMessageBytes,
                        wc.byte_len);
  } else if (wc.status != IBV_WC_SUCCESS && wc.status != IBV_WC_WR_FLUSH_ERR) {
    context->log(1, std::string("verbs: a message was lost on arrival: ") +
                        ibv_wc_status_str(wc.status));
  }
  if (!context->stop.load(std::memory_order_relaxed) && !PostReceive(context, slot)) {
    context->log(0, "verbs: cannot post a message receive slot again; messages may stall");
  }
}

int EnsureSendSlotsLocked(Endpoint* endpoint, rdv_transport_error_t* error) {
  if (endpoint->send_slots_mr != nullptr) return RDV_TRANSPORT_OK;
  Context* context = endpoint->context;
  const int slots = context->settings.queue_depth;
  char* memory = AllocateSlots(slots);
  ibv_mr* mr = memory == nullptr ? nullptr
                                 : ibv_reg_mr(context->pd, memory, slots * kMaxMessageBytes,
                                              IBV_ACCESS_LOCAL_WRITE);
  if (mr == nullptr) {
    std::free(memory);
    return SetError(error, RDV_TRANSPORT_RESOURCE_EXHAUSTED,
                    "verbs: cannot register %d message send slots: %s", slots,
                    std::strerror(errno));
  }
  endpoint->send_slots = memory;
  endpoint->send_slots_mr = mr;
  for (int slot = slots - 1; slot >= 0; --slot) endpoint->free_send_slots.push_back(slot);
  return RDV_TRANSPORT_OK;
}

void FreeSendSlots(Endpoint* endpoint) {
  if (endpoint->send_slots_mr != nullptr) ibv_dereg_mr(endpoint->send_slots_mr);
  std::free(endpoint->send_slots);
}

}  // namespace rdv::verbs
