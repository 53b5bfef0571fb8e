#include "control/graph_session.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <mutex>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "control/grpc_status.h"
#include "control/named_tensor.h"
#include "control/protocol.h"
#include "control/security.h"
#include "rdv/control/worker.grpc.pb.h"
#include "core/notification.h"
#include "graph/partition.h"

namespace rdv::control {

class GraphSession::Worker {
 public:
  Worker(std::string name, const std::string& address, const SecurityOptions& security)
      : name_(std::move(name)),
        stub_(WorkerService::NewStub(
            CreateMemberChannel(address, security, grpc::ChannelArguments()))) {}

  const std::string& name() const { return name_; }
  WorkerService::Stub* stub() { return stub_.get(); }
  uint64_t incarnation = 0;

  // A unary call with a deadline; the error names this worker.
  template <typename Request, typename Response, typename Method>
  absl::Status Call(Method method, const Request& request, Response* response,
                    absl::Duration timeout) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    const absl::Status status = FromGrpcStatus((stub_.get()->*method)(&context, request, response));
    return Annotate(status);
  }

  absl::Status Annotate(const absl::Status& status) const {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat(name_, ": ", status.message()));
  }

 private:
  std::string name_;
  std::unique_ptr<WorkerService::Stub> stub_;
};

absl::StatusOr<std::unique_ptr<GraphSession>> GraphSession::Connect(const ClusterSpec& cluster,
                                                                   absl::Duration call_timeout) {
  RDV_ASSIGN_OR_RETURN(const SecurityOptions security, SecurityOptions::FromEnvironment());
  auto session = std::unique_ptr<GraphSession>(new GraphSession());
  session->call_timeout_ = call_timeout;
  for (const std::string& name : cluster.WorkerNames()) {
    RDV_ASSIGN_OR_RETURN(const std::string address, cluster.AddressOf(name));
    auto worker = std::make_unique<Worker>(name, address, security);
    HandshakeRequest request;
    request.set_worker_name("/job:client/replica:0/task:0");
    request.set_protocol_version(kProtocolVersion);
    HandshakeResponse response;
    RDV_RETURN_IF_ERROR(
        worker->Call(&WorkerService::Stub::Handshake, request, &response, call_timeout));
    worker->incarnation = response.incarnation();
    session->workers_[name] = std::move(worker);
  }
  return session;
}

GraphSession::~GraphSession() { Deregister(); }

uint64_t GraphSession::incarnation(const std::string& worker) const {
  auto it = workers_.find(worker);
  return it == workers_.end() ? 0 : it->second->incarnation;
}

void GraphSession::Deregister() {
  for (const auto& [worker, handle] : handles_) {
    CleanupGraphRequest request;
    request.set_graph_handle(handle);
    CleanupGraphResponse response;
    (void)workers_[worker]->Call(&WorkerService::Stub::CleanupGraph, request, &response,
                                 call_timeout_);
  }
  handles_.clear();
}

absl::Status GraphSession::Register(const graph::Graph& graph,
                                    const std::vector<std::string>& fetches) {
  Deregister();
  for (int i = 0; i < graph.num_nodes(); ++i) {
    const std::string worker = graph.device(i).WorkerName();
    if (!workers_.contains(worker)) {
      return absl::InvalidArgumentError(absl::StrCat(graph::NodeContext(graph.node(i)),
                                                     "is placed on ", graph.node(i).device(),
                                                     ", whose worker is not in the cluster"));
    }
  }
  graph::PartitionOptions options;
  options.by = graph::PartitionOptions::By::kWorker;
  options.incarnation = [this](const DeviceName& device) {
    return incarnation(device.WorkerName());
  };
  RDV_ASSIGN_OR_RETURN(partitions_, graph::Partition(graph, options));

  worker_fetches_.clear();
  fetch_sources_.clear();
  for (const std::string& fetch : fetches) {
    std::optional<int> node = graph.FindNode(fetch.substr(0, fetch.rfind(':')));
    if (!node) return absl::InvalidArgumentError(absl::StrCat("fetch '", fetch, "': no such node"));
    const std::string worker = graph.device(*node).WorkerName();
    std::vector<std::string>& list = worker_fetches_[worker];
    fetch_sources_.emplace_back(worker, static_cast<int>(list.size()));
    list.push_back(fetch);
  }
  for (const auto& [worker, partition] : partitions_) {
    RegisterGraphRequest request;
    request.set_graph_def(partition.SerializeAsString());
    RegisterGraphResponse response;
    RDV_RETURN_IF_ERROR(workers_[worker]->Call(&WorkerService::Stub::RegisterGraph, request,
                                               &response, call_timeout_));
    handles_[worker] = response.graph_handle();
  }
  return absl::OkStatus();
}

StepResult GraphSession::RunStep(int64_t step_id, absl::Duration timeout) {
  struct Call {
    grpc::ClientContext context;
    RunGraphRequest request;
    RunGraphResponse response;
    absl::Status status;
  };
  // Shared with the callbacks: a callback may still be leaving (unlocking)
  // after the last answer lets this function return.
  struct Answers {
    std::mutex mu;
    size_t count = 0;  // mu
    size_t expected = 0;
    Notification all;
  };
  std::map<std::string, std::unique_ptr<Call>> calls;
  auto answers = std::make_shared<Answers>();
  const absl::Time start = absl::Now();
  for (const auto& [worker, handle] : handles_) {
    auto call = std::make_unique<Call>();
    call->context.set_deadline(absl::ToChronoTime(start + timeout));
    call->request.set_graph_handle(handle);
    call->request.set_step_id(step_id);
    for (const std::string& fetch : worker_fetches_[worker]) call->request.add_fetches(fetch);
    calls[worker] = std::move(call);
  }
  answers->expected = calls.size();
  for (auto& [worker, call] : calls) {
    Call* raw = call.get();
    Worker* const target = workers_[worker].get();
    target->stub()->async()->RunGraph(
        &raw->context, &raw->request, &raw->response,
        [answers, raw, target](grpc::Status status) {
          raw->status = target->Annotate(FromGrpcStatus(status));
          bool last = false;
          {
            std::lock_guard lock(answers->mu);
            last = ++answers->count == answers->expected;
          }
          if (last) answers->all.Notify();
        });
  }
  // Every call has a deadline, so gRPC answers each; the margin covers its
  // own delay in doing so.
  if (!calls.empty() && !answers->all.WaitForNotificationWithTimeout(timeout + absl::Seconds(30))) {
    for (auto& [worker, call] : calls) call->context.TryCancel();
    answers->all.WaitForNotification();
  }
  StepResult result;
  result.took = absl::Now() - start;
  for (auto& [worker, call] : calls) {
    result.worker_status[worker] = call->status;
    if (result.status.ok()) result.status = call->status;
  }
  for (const auto& [worker, index] : fetch_sources_) {
    if (!result.status.ok()) break;
    absl::StatusOr<Tensor> value = FromNamedTensor(calls[worker]->response.fetched(index));
    if (!value.ok()) result.status = value.status();
    if (value.ok()) result.fetched.push_back(*std::move(value));
  }
  for (const auto& [worker, handle] : handles_) {
    CleanupStepRequest request;
    request.set_step_id(step_id);
    CleanupStepResponse response;
    (void)workers_[worker]->Call(&WorkerService::Stub::CleanupStep, request, &response,
                                 call_timeout_);
  }
  return result;
}

}  // namespace rdv::control
