#include "control/release_batcher.h"

#include "core/logging.h"

namespace rdv::control {

void ReleaseBatcher::Release(const ReleasedTransfer& transfer) {
  std::lock_guard lock(mu_);
  if (drained_) return;  // shutting down: the producer frees it at cleanup
  queued_.push_back(transfer);
  if (IdleLocked()) ScheduleCallLocked();
}

void ReleaseBatcher::TakeQueued(google::protobuf::RepeatedPtrField<ReleasedTransfer>* carrier) {
  std::lock_guard lock(mu_);
  for (ReleasedTransfer& transfer : queued_) *carrier->Add() = std::move(transfer);
  queued_.clear();
}

// Replaces an alarm that has fired: a new one per window. Like the call's
// callback, the alarm's captures only raw pointers and ends under mu_.
void ReleaseBatcher::ScheduleCallLocked() {
  call_scheduled_ = true;
  alarm_ = std::make_unique<grpc::Alarm>();
  alarm_->Set(absl::ToChronoTime(absl::Now() + kCarryWindow), [this](bool) {
    std::lock_guard lock(mu_);
    call_scheduled_ = false;
    if (!queued_.empty() && in_flight_ == nullptr) {
      SendLocked();
    } else if (IdleLocked()) {
      idle_.notify_all();
    }
  });
}

struct ReleaseBatcher::Call {
  grpc::ClientContext context;
  ReleaseTransfersRequest request;
  ReleaseTransfersResponse response;
};

// The callback captures only raw pointers and its last act is under mu_:
// once Drain sees no call in flight, nothing of this batcher is touched
// again, and the stub and channel go on the thread that owns them (a
// channel released from inside its own call's callback tripped gRPC).
void ReleaseBatcher::SendLocked() {
  auto* call = new Call;
  for (ReleasedTransfer& transfer : queued_) *call->request.add_transfers() = std::move(transfer);
  queued_.clear();
  in_flight_ = call;
  stub_->async()->ReleaseTransfers(
      &call->context, &call->request, &call->response, [this, call](grpc::Status status) {
        // The producer also frees them when the step is cleaned up, and
        // all it held when it is gone: a producer that cannot be reached
        // (one that exited first, at a clean end too) is no one's loss here.
        if (status.error_code() == grpc::StatusCode::UNAVAILABLE) {
          RDV_LOG(Info) << "ReleaseTransfers of " << call->request.transfers_size()
                        << " transfers found the producer gone: " << status.error_message();
        } else if (!status.ok()) {
          RDV_LOG(Warning) << "ReleaseTransfers of " << call->request.transfers_size()
                           << " transfers failed: " << status.error_message();
        }
        std::lock_guard lock(mu_);
        in_flight_ = nullptr;
        delete call;
        if (!queued_.empty()) {
          ScheduleCallLocked();
        } else if (IdleLocked()) {
          idle_.notify_all();
        }
      });
}

void ReleaseBatcher::Drain(absl::Duration timeout) {
  std::unique_lock lock(mu_);
  drained_ = true;
  queued_.clear();
  if (call_scheduled_) {
    // No alarm is set after drained_; its callback (ok false) takes mu_.
    grpc::Alarm* alarm = alarm_.get();
    lock.unlock();
    alarm->Cancel();
    lock.lock();
  }
  if (idle_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return IdleLocked(); })) {
    return;
  }
  if (in_flight_ != nullptr) in_flight_->context.TryCancel();
  idle_.wait(lock, [this] { return IdleLocked(); });
}

}  // namespace rdv::control
