#include "control/tensor_service.h"

#include "absl/strings/str_cat.h"
#include "control/protocol.h"

namespace rdv::control {

TensorService::TensorService(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr)
    : env_(env), rendezvous_mgr_(rendezvous_mgr) {}

absl::Status TensorService::Admit(const RecvTensorRequest& request, const ParsedKey& key) {
  if (request.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("RecvTensor refused: ", VersionMismatch("the consumer", request.protocol_version(),
                                                             absl::StrCat("worker ", env_.worker_name))));
  }
  if (request.protocol() != kProtocolGrpc && request.protocol() != env_.protocol) {
    return absl::FailedPreconditionError(
        absl::StrCat("RecvTensor with protocol '", Excerpt(request.protocol(), 64), "': worker ",
                     env_.worker_name, " serves ", env_.protocol,
                     " (start every worker with the same --protocol)"));
  }
  if (!InSameAddressSpace(key.src(), env_.worker)) {
    return absl::InvalidArgumentError(absl::StrCat("RecvTensor of '", Excerpt(key.FullKey()),
                                                   "' sent to ", env_.worker_name,
                                                   ", but its source device is not on it"));
  }
  if (key.src_incarnation() != env_.incarnation) {
    return absl::AbortedError(absl::StrCat(
        "RecvTensor of '", Excerpt(key.FullKey()), "': worker ", env_.worker_name,
        " has incarnation ", FormatIncarnation(env_.incarnation),
        ", the key names ", FormatIncarnation(key.src_incarnation()),
        "; the worker job was probably restarted"));
  }
  if (request.fetch_held()) return absl::OkStatus();  // served once: TakeHeldValue
  std::lock_guard lock(mu_);
  if (!seen_requests_[request.step_id()].insert(request.request_id()).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("RecvTensor request ", request.request_id(), " of step ", request.step_id(),
                     " was already received or withdrawn; it is never served twice"));
  }
  return absl::OkStatus();
}

void TensorService::Register(int64_t step_id, int64_t request_id, Reactor* reactor) {
  std::lock_guard lock(mu_);
  live_recvs_[{step_id, request_id}] = reactor;
}

void TensorService::Unregister(int64_t step_id, int64_t request_id) {
  std::lock_guard lock(mu_);
  live_recvs_.erase({step_id, request_id});
}

absl::Status TensorService::ReleaseTransfers(
    const google::protobuf::RepeatedPtrField<ReleasedTransfer>& transfers) {
  absl::Status status;
  for (const ReleasedTransfer& transfer : transfers) {
    if (transfer.cuda_ipc()) {
      status.Update(cuda_ipc_lent_.Release(transfer));
    } else if (env_.data_plane == nullptr) {
      status.Update(absl::FailedPreconditionError(
          absl::StrCat("ReleaseTransfers: worker ", env_.worker_name,
                       " serves protocol grpc, which holds no transport transfers")));
    } else {
      status.Update(env_.data_plane->Release(transfer));
    }
  }
  return status;
}

void TensorService::DropStep(int64_t step_id) {
  if (env_.data_plane != nullptr) env_.data_plane->DropStep(step_id);
  cuda_ipc_lent_.DropStep(step_id);
  held_values_.DropIf([step_id](const std::pair<int64_t, int64_t>& held, const HeldValue&) {
    return held.first == step_id;
  });
  std::lock_guard lock(mu_);
  seen_requests_.erase(step_id);
}

void TensorService::DropAllHeld() {
  held_values_.Clear();
  cuda_ipc_lent_.Clear();
  if (env_.data_plane != nullptr) env_.data_plane->DropAllHeld();
}

void TensorService::CountHoldings(HoldingsResponse* holdings) const {
  if (const DataPlane* plane = env_.data_plane) {
    holdings->set_transfers(plane->transfers_held());
    holdings->set_sends(plane->sends_in_flight());
  }
  holdings->set_values(held_values_.size());
  holdings->set_cuda_ipc_lent(cuda_ipc_lent_.size());
}

void TensorService::HoldForFetch(int64_t step_id, int64_t request_id, const ParsedKey& key,
                                 Tensor value, bool is_dead) {
  held_values_.Insert({step_id, request_id}, {std::string(key.FullKey()), std::move(value), is_dead},
                      WatcherFor(key));
}

absl::StatusOr<TensorService::HeldValue> TensorService::TakeHeldValue(int64_t step_id,
                                                                      int64_t request_id,
                                                                      absl::string_view key) {
  std::optional<HeldValue> value = held_values_.Take(
      {step_id, request_id}, [&](const HeldValue& held) { return held.key == key; });
  if (value.has_value()) return *std::move(value);
  return absl::NotFoundError(absl::StrCat(
      "worker ", env_.worker_name, " holds no value of '", Excerpt(key), "' for request ",
      request_id, " of step ", step_id,
      " (already fetched, its step cleaned up, or its consumer lost)"));
}

}  // namespace rdv::control
