#include "control/graph_service.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "control/grpc_status.h"
#include "control/named_tensor.h"

namespace rdv::control {

// A RunGraph whose client went away (or that a shutting-down server
// cancels) aborts its step, so that the run ends instead of waiting.
class GraphService::RunGraphReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit RunGraphReactor(std::shared_ptr<Rendezvous> rendezvous)
      : rendezvous_(std::move(rendezvous)) {}
  void OnCancel() override {
    rendezvous_->StartAbort(absl::CancelledError("RunGraph was cancelled"));
  }
  void OnDone() override { delete this; }

 private:
  const std::shared_ptr<Rendezvous> rendezvous_;
};

GraphService::GraphService(const WorkerEnv& env, RendezvousMgr& rendezvous_mgr,
                           StepControl& steps)
    : env_(env), rendezvous_mgr_(rendezvous_mgr), steps_(steps) {}

absl::StatusOr<std::string> GraphService::RegisterGraph(const RegisterGraphRequest& request) {
  graph::GraphDef def;
  if (!def.ParseFromString(request.graph_def())) {
    return absl::InvalidArgumentError("RegisterGraph: graph_def is not a serialized GraphDef");
  }
  for (const graph::NodeDef& node : def.node()) {
    absl::StatusOr<DeviceName> device = DeviceName::Parse(node.device());
    if (device.ok() && !InSameAddressSpace(*device, env_.worker)) {
      return absl::InvalidArgumentError(absl::StrCat(graph::NodeContext(node), "is placed on ",
                                                     node.device(), ", not on ",
                                                     env_.worker_name));
    }
  }
  RDV_ASSIGN_OR_RETURN(std::unique_ptr<graph::Executor> executor,
                       graph::Executor::Create(std::move(def)));
  std::lock_guard lock(mu_);
  const std::string handle = absl::StrCat("graph_", ++graphs_registered_);
  graphs_[handle] = std::move(executor);
  return handle;
}

std::shared_ptr<const graph::Executor> GraphService::Find(const std::string& handle) {
  std::lock_guard lock(mu_);
  auto it = graphs_.find(handle);
  return it == graphs_.end() ? nullptr : it->second;
}

grpc::ServerUnaryReactor* GraphService::RunGraph(const RunGraphRequest& request,
                                                 RunGraphResponse* response) {
  std::shared_ptr<Rendezvous> rendezvous = rendezvous_mgr_.Find(request.step_id());
  auto* reactor = new RunGraphReactor(rendezvous);
  std::shared_ptr<const graph::Executor> executor = Find(request.graph_handle());
  if (executor == nullptr) {
    reactor->Finish(ToGrpcStatus(absl::NotFoundError(absl::StrCat(
        "RunGraph: no graph '", request.graph_handle(), "' on ", env_.worker_name))));
    return reactor;
  }
  graph::Executor::Feeds feeds;
  for (const NamedTensor& feed : request.feeds()) {
    absl::StatusOr<Tensor> value = FromNamedTensor(feed);
    if (!value.ok()) {
      reactor->Finish(ToGrpcStatus(value.status()));
      return reactor;
    }
    feeds.emplace_back(feed.name(), *std::move(value));
  }
  const std::vector<std::string> fetches(request.fetches().begin(), request.fetches().end());
  executor->RunAsync(
      rendezvous.get(), feeds, fetches,
      [this, executor, rendezvous, step_id = request.step_id(), fetches, response,
       reactor](absl::Status status, std::vector<Tensor> fetched) {
        // The root cause fails the step on the other workers too.
        if (!status.ok()) steps_.FailStep(step_id, status);
        for (size_t i = 0; status.ok() && i < fetched.size(); ++i) {
          status = ToNamedTensor(fetches[i], fetched[i], response->add_fetched());
        }
        reactor->Finish(ToGrpcStatus(status));
      });
  return reactor;
}

absl::Status GraphService::CleanupGraph(const std::string& handle) {
  std::lock_guard lock(mu_);
  if (graphs_.erase(handle) == 0) {
    return absl::NotFoundError(absl::StrCat("CleanupGraph: no graph '", handle, "' on ",
                                            env_.worker_name));
  }
  return absl::OkStatus();
}

}  // namespace rdv::control
