#include "control/release_batcher.h"

#include "core/logging.h"

namespace rdv::control {

void ReleaseBatcher::Release(const ReleasedTransfer& transfer) {
  std::lock_guard lock(mu_);
  queued_.push_back(transfer);
  if (!in_flight_) SendLocked();
}

void ReleaseBatcher::SendLocked() {
  struct Call {
    grpc::ClientContext context;
    ReleaseTransfersRequest request;
    ReleaseTransfersResponse response;
  };
  auto* call = new Call;
  for (ReleasedTransfer& transfer : queued_) *call->request.add_transfers() = std::move(transfer);
  queued_.clear();
  in_flight_ = true;
  stub_->async()->ReleaseTransfers(
      &call->context, &call->request, &call->response,
      [self = shared_from_this(), call](grpc::Status status) {
        if (!status.ok()) {
          // The producer also frees them when the step is cleaned up.
          RDV_LOG(Warning) << "ReleaseTransfers of " << call->request.transfers_size()
                           << " transfers failed: " << status.error_message();
        }
        delete call;
        std::lock_guard lock(self->mu_);
        self->in_flight_ = false;
        if (!self->queued_.empty()) {
          self->SendLocked();
        } else {
          self->idle_.notify_all();
        }
      });
}

void ReleaseBatcher::Drain(absl::Duration timeout) {
  std::unique_lock lock(mu_);
  idle_.wait_for(lock, absl::ToChronoNanoseconds(timeout), [this] { return !in_flight_; });
}

}  // namespace rdv::control
