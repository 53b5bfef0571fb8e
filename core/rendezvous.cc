#include "core/rendezvous.h"

#include <memory>

#include "absl/strings/str_cat.h"
#include "core/notification.h"

namespace rdv {
namespace {

// Written once by the callback, then read after `done` is notified.
struct BlockingRecvState {
  Notification done;
  absl::Status status;
  Tensor value;
  bool is_dead = false;
};

}  // namespace

absl::Status RecvCancelledError(absl::string_view key) {
  return absl::CancelledError(absl::StrCat("Recv of '", key, "' was cancelled"));
}

absl::Status Rendezvous::Recv(const ParsedKey& key, const RendezvousArgs& args, Tensor* value,
                              bool* is_dead, absl::Duration timeout) {
  // A private manager lets the timeout withdraw this Recv without
  // cancelling the caller's other operations; the caller's manager, when
  // there is one, cancels through it.
  CancellationManager timeout_cancel;
  CancellationManager* const caller_cancel = args.cancellation_manager;
  const CancellationManager::Token caller_token = caller_cancel ? caller_cancel->NewToken() : 0;
  if (caller_cancel != nullptr &&
      !caller_cancel->RegisterCallback(caller_token, [&timeout_cancel] { timeout_cancel.StartCancel(); })) {
    return RecvCancelledError(key.FullKey());
  }
  RendezvousArgs recv_args = args;
  recv_args.cancellation_manager = &timeout_cancel;

  auto state = std::make_shared<BlockingRecvState>();
  RecvAsync(key, recv_args,
            [state](const absl::Status& status, const RendezvousArgs&, const RendezvousArgs&,
                    const Tensor& v, bool dead) {
              state->status = status;
              state->value = v;
              state->is_dead = dead;
              state->done.Notify();
            });

  const bool timed_out = !state->done.WaitForNotificationWithTimeout(timeout);
  if (timed_out) {
    // Either withdraws the waiter (done runs now with CANCELLED) or the
    // value is already on its way and done runs shortly.
    timeout_cancel.StartCancel();
  }
  if (caller_cancel != nullptr) caller_cancel->DeregisterCallback(caller_token);

  state->done.WaitForNotification();
  if (timed_out && absl::IsCancelled(state->status) &&
      !(caller_cancel != nullptr && caller_cancel->IsCancelled())) {
    return absl::DeadlineExceededError(absl::StrCat("Recv of '", key.FullKey(),
                                                    "' timed out after ",
                                                    absl::FormatDuration(timeout)));
  }
  if (state->status.ok()) {
    *value = std::move(state->value);
    *is_dead = state->is_dead;
  }
  return state->status;
}

}  // namespace rdv
