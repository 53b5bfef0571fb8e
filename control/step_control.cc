#include "control/step_control.h"

#include <memory>
#include <string>
#include <utility>

#include <grpcpp/client_context.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/logging.h"

namespace rdv::control {

StepControl::StepControl(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr)
    : env_(env), rendezvous_mgr_(rendezvous_mgr) {}

void StepControl::AddCleaner(StepCleaner cleaner) { cleaners_.push_back(std::move(cleaner)); }

void StepControl::AbortStep(const AbortStepRequest& request) {
  absl::Status status(static_cast<absl::StatusCode>(request.code()), request.message());
  if (status.ok()) status = absl::AbortedError(absl::StrCat("AbortStep ", request.step_id()));
  RDV_LOG(Info) << env_.worker_name << ": aborting step " << request.step_id() << ": " << status;
  rendezvous_mgr_.Find(request.step_id())->StartAbort(status);
  if (request.propagate()) Forward(request);
}

void StepControl::FailStep(int64_t step_id, const absl::Status& cause) {
  AbortStepRequest abort;
  abort.set_step_id(step_id);
  abort.set_code(static_cast<int>(cause.code()));
  abort.set_message(std::string(cause.message()));
  abort.set_propagate(true);
  AbortStep(abort);
}

void StepControl::Forward(const AbortStepRequest& request) {
  AbortStepRequest forward = request;
  forward.set_propagate(false);
  for (const std::string& worker : env_.worker_cache->cluster().WorkerNames()) {
    if (worker == env_.worker_name) continue;
    absl::StatusOr<std::shared_ptr<WorkerClient>> client = env_.worker_cache->Get(worker);
    if (!client.ok()) continue;
    struct Call {
      grpc::ClientContext context;
      AbortStepRequest request;
      AbortStepResponse response;
      std::shared_ptr<WorkerClient> client;
    };
    auto* call = new Call;
    call->client = *client;
    call->request = forward;
    call->context.set_deadline(absl::ToChronoTime(absl::Now() + env_.options.peer_timeout));
    {
      std::lock_guard lock(mu_);
      ++forwards_in_flight_;
    }
    call->client->stub->async()->AbortStep(
        &call->context, &call->request, &call->response,
        [this, call, worker](grpc::Status forwarded) {
          if (!forwarded.ok()) {
            RDV_LOG(Warning) << "forwarding AbortStep to " << worker
                             << " failed: " << forwarded.error_message();
          }
          delete call;
          std::lock_guard lock(mu_);
          if (--forwards_in_flight_ == 0) forwards_done_.notify_all();
        });
  }
}

void StepControl::CleanupStep(int64_t step_id) {
  rendezvous_mgr_.Cleanup(step_id);
  for (const StepCleaner& cleaner : cleaners_) cleaner(step_id);
}

void StepControl::WaitForForwards() {
  // Forwarded aborts carry a deadline, so this wait is bounded.
  std::unique_lock lock(mu_);
  forwards_done_.wait(lock, [this] { return forwards_in_flight_ == 0; });
}

}  // namespace rdv::control
