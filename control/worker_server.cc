#include "control/worker_server.h"

#include <random>
#include <utility>

#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server.h>
#include <grpcpp/server_builder.h>
#include <grpcpp/support/server_callback.h>

#include "absl/strings/str_cat.h"
#include "control/data_plane.h"
#include "control/driver_service.h"
#include "control/fast_path.h"
#include "control/graph_service.h"
#include "control/grpc_status.h"
#include "control/protocol.h"
#include "control/rpc_remote_rendezvous.h"
#include "control/security.h"
#include "control/stats_format.h"
#include "control/step_control.h"
#include "control/tensor_service.h"
#include "control/worker_env.h"
#include "core/cuda_settings.h"
#include "core/logging.h"

namespace rdv::control {
namespace {

using WorkerServiceBase = WorkerService::WithCallbackMethod_Handshake<
    WorkerService::WithRawCallbackMethod_RecvTensor<
        WorkerService::WithCallbackMethod_ReleaseTransfers<
            WorkerService::WithCallbackMethod_CleanupStep<
                WorkerService::WithCallbackMethod_AbortStep<
                    WorkerService::WithCallbackMethod_WithdrawRecvTensor<
                        WorkerService::WithCallbackMethod_RegisterGraph<
                            WorkerService::WithCallbackMethod_RunGraph<
                                WorkerService::WithCallbackMethod_CleanupGraph<
                                    WorkerService::WithCallbackMethod_GetStats<
                                        WorkerService::Service>>>>>>>>>>;

void FillStats(const WorkerEnv& env, GetStatsResponse* response) {
  response->set_worker_name(env.worker_name);
  response->set_incarnation(env.incarnation);
  response->set_protocol(env.protocol);
  env.stats->AppendTo(env.data_plane, response);
  if (env.fast_path != nullptr) env.fast_path->AppendStats(response);
}

uint64_t NewIncarnation() {
  std::random_device random;
  uint64_t value = 0;
  while (value == 0) value = uint64_t{random()} << 32 | random();
  return value;
}

// The WorkerService's gRPC face: every call passes the door, then goes to
// the room that serves it.
class WorkerServiceImpl final : public WorkerServiceBase {
 public:
  // Everything passed outlives this.
  WorkerServiceImpl(const WorkerEnv& env, TensorService& tensors, StepControl& steps,
                    GraphService& graphs)
      : env_(env), tensors_(tensors), steps_(steps), graphs_(graphs) {}

  grpc::ServerUnaryReactor* Handshake(grpc::CallbackServerContext* context,
                                      const HandshakeRequest* request,
                                      HandshakeResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    if (request->protocol_version() != kProtocolVersion) {
      return Reply(context, absl::FailedPreconditionError(VersionMismatch(
                                absl::StrCat("worker ", Excerpt(request->worker_name(), 64)),
                                request->protocol_version(), env_.worker_name)));
    }
    response->set_worker_name(env_.handshake.worker_name());
    response->set_incarnation(env_.handshake.incarnation());
    response->set_protocol_version(env_.handshake.protocol_version());
    *response->mutable_transports() = env_.handshake.transports();
    return Reply(context, absl::OkStatus());
  }
  grpc::ServerWriteReactor<grpc::ByteBuffer>* RecvTensor(
      grpc::CallbackServerContext* context, const grpc::ByteBuffer* request) override {
    return tensors_.RecvTensor(context, Admit(context), request);
  }
  grpc::ServerUnaryReactor* ReleaseTransfers(grpc::CallbackServerContext* context,
                                             const ReleaseTransfersRequest* request,
                                             ReleaseTransfersResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    return Reply(context, tensors_.ReleaseTransfers(request->transfers()));
  }
  grpc::ServerUnaryReactor* WithdrawRecvTensor(grpc::CallbackServerContext* context,
                                               const WithdrawRecvTensorRequest* request,
                                               WithdrawRecvTensorResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    response->set_withdrawn(tensors_.Withdraw(request->step_id(), request->request_id()));
    return Reply(context, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* CleanupStep(grpc::CallbackServerContext* context,
                                        const CleanupStepRequest* request,
                                        CleanupStepResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    steps_.CleanupStep(request->step_id());
    return Reply(context, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* GetStats(grpc::CallbackServerContext* context,
                                     const GetStatsRequest*, GetStatsResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    FillStats(env_, response);
    return Reply(context, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* AbortStep(grpc::CallbackServerContext* context,
                                      const AbortStepRequest* request,
                                      AbortStepResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    steps_.AbortStep(*request);
    return Reply(context, absl::OkStatus());
  }
  grpc::ServerUnaryReactor* RegisterGraph(grpc::CallbackServerContext* context,
                                          const RegisterGraphRequest* request,
                                          RegisterGraphResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    absl::StatusOr<std::string> handle = graphs_.RegisterGraph(*request);
    if (handle.ok()) response->set_graph_handle(*handle);
    return Reply(context, handle.status());
  }
  grpc::ServerUnaryReactor* RunGraph(grpc::CallbackServerContext* context,
                                     const RunGraphRequest* request,
                                     RunGraphResponse* response) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    return graphs_.RunGraph(*request, response);
  }
  grpc::ServerUnaryReactor* CleanupGraph(grpc::CallbackServerContext* context,
                                         const CleanupGraphRequest* request,
                                         CleanupGraphResponse*) override {
    if (absl::Status denied = Admit(context); !denied.ok()) return Reply(context, denied);
    return Reply(context, graphs_.CleanupGraph(request->graph_handle()));
  }

 private:
  absl::Status Admit(grpc::CallbackServerContext* context) const {
    return AdmitCaller(*context, env_.options.security);
  }

  const WorkerEnv& env_;
  TensorService& tensors_;
  StepControl& steps_;
  GraphService& graphs_;
};

}  // namespace

// The rooms, in the order they are built; each outlives the ones after it.
class WorkerServer::Impl {
 public:
  explicit Impl(WorkerServerOptions options)
      : options_(std::move(options)),
        worker_cache_(options_.cluster, options_.control),
        rendezvous_mgr_([this](int64_t step_id) {
          return std::make_shared<RpcRemoteRendezvous>(&env_, step_id);
        }),
        steps_(env_, rendezvous_mgr_),
        tensors_(env_, rendezvous_mgr_),
        graphs_(env_, rendezvous_mgr_, steps_),
        worker_service_(env_, tensors_, steps_, graphs_),
        driver_service_(env_, rendezvous_mgr_, tensors_) {
    env_.worker_name = ClusterSpec::WorkerName(options_.job, options_.task);
    env_.worker = *DeviceName::Parse(env_.worker_name);
    env_.incarnation = NewIncarnation();
    env_.options = options_.control;
    env_.worker_cache = &worker_cache_;
    env_.protocol = options_.protocol;
    env_.handshake.set_worker_name(env_.worker_name);
    env_.handshake.set_incarnation(env_.incarnation);
    env_.handshake.set_protocol_version(kProtocolVersion);
    env_.stats = &stats_;
    steps_.AddCleaner([this](int64_t step_id) { tensors_.DropStep(step_id); });
  }

  absl::Status Start();
  void Shutdown();
  void StartFastPath() {
    if (!data_plane_->carries_messages()) {
      RDV_LOG(Info) << "fast path off: transport " << data_plane_->transport().name()
                    << " carries no messages (" << data_plane_->transport().description()
                    << "); every Recv takes RecvTensor";
      return;
    }
    fast_path_ = std::make_unique<FastPath>(env_, rendezvous_mgr_, tensors_);
    env_.fast_path = fast_path_.get();
  }

  WorkerServerOptions options_;
  WorkerStats stats_;
  WorkerEnv env_;
  std::unique_ptr<DataPlane> data_plane_;
  WorkerCache worker_cache_;
  RendezvousMgr rendezvous_mgr_;
  StepControl steps_;
  TensorService tensors_;
  // Gone before the rooms it serves (it stops taking messages first).
  std::unique_ptr<FastPath> fast_path_;
  GraphService graphs_;
  WorkerServiceImpl worker_service_;
  DriverServiceImpl driver_service_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
};

absl::Status WorkerServer::Impl::Start() {
  RDV_RETURN_IF_ERROR(CheckExposure(options_.listen_address, env_.options.security,
                                    absl::StrCat("worker ", env_.worker_name)));
  RDV_RETURN_IF_ERROR(cuda::CheckSettings());
  if (options_.protocol != kProtocolGrpc) {
    RDV_ASSIGN_OR_RETURN(data_plane_, DataPlane::Create(options_.protocol, options_.data_plane));
    env_.data_plane = data_plane_.get();
    *env_.handshake.add_transports() = data_plane_->Describe();
    if (env_.options.fast_path) StartFastPath();
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(options_.listen_address, ServerCredentialsFor(env_.options.security),
                           &port);
  builder.RegisterService(&worker_service_);
  if (options_.enable_driver) builder.RegisterService(&driver_service_);
  builder.SetMaxReceiveMessageSize(kMaxRequestBytes);
  builder.SetMaxSendMessageSize(-1);
  // Peers ping often to notice a dead worker quickly (PeerChannelArguments).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  server_ = builder.BuildAndStart();
  if (server_ == nullptr || port == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on '", options_.listen_address, "' (in use or not local?)"));
  }
  const size_t colon = options_.listen_address.rfind(':');
  address_ = absl::StrCat(options_.listen_address.substr(0, colon), ":", port);
  RDV_LOG(Info) << env_.worker_name << " listening on " << address_ << ", incarnation "
                << FormatIncarnation(env_.incarnation);
  return absl::OkStatus();
}

void WorkerServer::Impl::Shutdown() {
  if (server_ == nullptr) return;
  // No request starts a wait on a step from here on.
  if (fast_path_ != nullptr) fast_path_->Stop();
  rendezvous_mgr_.CleanupAll();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
  rendezvous_mgr_.CleanupAll();
  // Before the worker cache goes: what is held keeps leases on its clients.
  tensors_.DropAllHeld();
  steps_.WaitForForwards();
}

absl::StatusOr<WorkerServerOptions> WorkerServerOptions::FromEnvironment() {
  return FromEnvironment(WorkerServerOptions());
}

absl::StatusOr<WorkerServerOptions> WorkerServerOptions::FromEnvironment(
    WorkerServerOptions defaults) {
  WorkerServerOptions options = std::move(defaults);
  RDV_ASSIGN_OR_RETURN(options.control, ControlOptions::FromEnvironment(options.control));
  RDV_ASSIGN_OR_RETURN(options.data_plane, DataPlaneOptions::FromEnvironment(options.data_plane));
  return options;
}

absl::StatusOr<std::unique_ptr<WorkerServer>> WorkerServer::Start(WorkerServerOptions options) {
  if (options.task < 0) return absl::InvalidArgumentError("worker task must be >= 0");
  if (!IsValidJobName(options.job)) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker job '", options.job, "' must be a letter then [A-Za-z0-9_]"));
  }
  auto impl = std::make_unique<Impl>(std::move(options));
  RDV_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<WorkerServer>(new WorkerServer(std::move(impl)));
}

WorkerServer::WorkerServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
WorkerServer::~WorkerServer() { Shutdown(); }
const std::string& WorkerServer::worker_name() const { return impl_->env_.worker_name; }
uint64_t WorkerServer::incarnation() const { return impl_->env_.incarnation; }
const std::string& WorkerServer::address() const { return impl_->address_; }
RendezvousMgr& WorkerServer::rendezvous_mgr() { return impl_->rendezvous_mgr_; }
WorkerCache& WorkerServer::worker_cache() { return impl_->worker_cache_; }
void WorkerServer::SetPeerAddress(absl::string_view job, int task, std::string address) {
  impl_->worker_cache_.SetAddress(job, task, std::move(address));
}
void WorkerServer::Shutdown() { impl_->Shutdown(); }
DataPlane* WorkerServer::data_plane() { return impl_->data_plane_.get(); }
FastPath* WorkerServer::fast_path() { return impl_->fast_path_.get(); }

std::optional<Tensor> WorkerServer::AllocatePeerReadable(DType dtype, const TensorShape& shape) {
  DataPlane* plane = data_plane();
  return plane != nullptr ? plane->AllocatePeerReadable(dtype, shape) : std::nullopt;
}

std::string WorkerServer::StatsAsPrometheus() const {
  GetStatsResponse stats;
  FillStats(impl_->env_, &stats);
  return control::StatsAsPrometheus(stats);
}

}  // namespace rdv::control
