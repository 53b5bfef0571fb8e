// rdv-launcher: starts, signals and stops rdv-worker processes on this host
// for a test or tool on another host or container (WorkerProcess::Launch),
// which can then kill, pause or restart its peer as if it were a child.
// A tool for test rigs, never for production: it runs rdv-worker for whoever
// passes its door, so it demands a cluster token (RDV_CLUSTER_TOKEN_FILE or
// RDV_CLUSTER_TOKEN), listens on loopback unless told otherwise (and then
// wants TLS too, as a worker does: control/security.h), and passes only
// RDV_* and UCX_* settings on to the workers.
//
// When it is ready it prints one line on stdout:
//   rdv-launcher ready 127.0.0.1:18600
// On SIGINT or SIGTERM it stops every worker it started, then exits.
#include <grpcpp/security/server_credentials.h>
#include <grpcpp/server_builder.h>

#include <csignal>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/strings/match.h"
#include "apps/tool_flags.h"
#include "control/grpc_status.h"
#include "control/security.h"
#include "rdv/control/worker.grpc.pb.h"
#include "control/worker_process.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:18600", "host:port to serve LauncherService on");

namespace rdv::control {
namespace {

// Only rdv's and UCX's own settings reach a worker: a variable such as
// LD_PRELOAD would run the caller's code.
absl::Status CheckSetting(const std::string& name) {
  if (absl::StartsWith(name, "RDV_") || absl::StartsWith(name, "UCX_")) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("rdv-launcher passes only RDV_* and UCX_* variables to workers, not '",
                   Excerpt(name, 64), "'"));
}

class Launcher final : public LauncherService::Service {
 public:
  explicit Launcher(SecurityOptions security) : security_(std::move(security)) {}

  grpc::Status StartWorker(grpc::ServerContext* context, const StartWorkerRequest* request,
                           StartWorkerResponse* response) override {
    if (absl::Status denied = AdmitCaller(*context, security_); !denied.ok()) {
      return ToGrpcStatus(denied);
    }
    const std::vector<std::string> args(request->args().begin(), request->args().end());
    EnvChanges env;
    for (const auto& [name, value] : request->set_env()) {
      if (absl::Status refused = CheckSetting(name); !refused.ok()) return ToGrpcStatus(refused);
      env.emplace_back(name, value);
    }
    for (const std::string& name : request->unset_env()) {
      if (absl::Status refused = CheckSetting(name); !refused.ok()) return ToGrpcStatus(refused);
      env.emplace_back(name, std::nullopt);
    }
    auto worker =
        WorkerProcess::Start(args, absl::Milliseconds(request->ready_timeout_ms()), env);
    if (!worker.ok()) return ToGrpcStatus(worker.status());
    response->set_worker_name((*worker)->worker_name());
    response->set_address((*worker)->address());
    response->set_incarnation((*worker)->incarnation());
    absl::MutexLock lock(&mu_);
    response->set_worker_id(++last_id_);
    workers_[last_id_] = *std::move(worker);
    return grpc::Status::OK;
  }

  grpc::Status SignalWorker(grpc::ServerContext* context, const SignalWorkerRequest* request,
                            SignalWorkerResponse*) override {
    if (absl::Status denied = AdmitCaller(*context, security_); !denied.ok()) {
      return ToGrpcStatus(denied);
    }
    absl::MutexLock lock(&mu_);
    auto it = workers_.find(request->worker_id());
    if (it == workers_.end()) return UnknownWorker(request->worker_id());
    const absl::Status status = it->second->Signal(request->signal());
    if (request->signal() == SIGKILL) workers_.erase(it);
    return ToGrpcStatus(status);
  }

  grpc::Status StopWorker(grpc::ServerContext* context, const StopWorkerRequest* request,
                          StopWorkerResponse* response) override {
    if (absl::Status denied = AdmitCaller(*context, security_); !denied.ok()) {
      return ToGrpcStatus(denied);
    }
    std::unique_ptr<WorkerProcess> worker;
    {
      absl::MutexLock lock(&mu_);
      auto it = workers_.find(request->worker_id());
      if (it == workers_.end()) return UnknownWorker(request->worker_id());
      worker = std::move(it->second);
      workers_.erase(it);
    }
    response->set_wait_status(worker->Stop());
    return grpc::Status::OK;
  }

  void StopAll() {
    absl::MutexLock lock(&mu_);
    for (auto& [id, worker] : workers_) worker->Stop();
    workers_.clear();
  }

 private:
  static grpc::Status UnknownWorker(uint64_t id) {
    return grpc::Status(grpc::StatusCode::NOT_FOUND,
                        absl::StrCat("no worker ", id, " (never started, or already reaped)"));
  }

  const SecurityOptions security_;
  absl::Mutex mu_;
  uint64_t last_id_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<uint64_t, std::unique_ptr<WorkerProcess>> workers_ ABSL_GUARDED_BY(mu_);
};

int Run() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  // Blocked before gRPC starts its threads, so that only sigwait sees them;
  // the workers it spawns start with them unblocked (posix_spawn keeps the
  // mask, so rdv-worker blocks them itself before it waits).
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<SecurityOptions> security = SecurityOptions::FromEnvironment();
  const std::string listen = absl::GetFlag(FLAGS_listen);
  absl::Status usable = security.status();
  if (usable.ok() && security->token.empty()) {
    usable = absl::FailedPreconditionError(
        "it starts processes for whoever calls it, so it needs a cluster token that its callers "
        "send too: RDV_CLUSTER_TOKEN_FILE (or RDV_CLUSTER_TOKEN), at least 16 random characters");
  }
  if (usable.ok()) usable = CheckExposure(listen, *security, "rdv-launcher");
  if (!usable.ok()) {
    std::cerr << "rdv-launcher: " << usable.message() << "\n";
    return 1;
  }
  Launcher launcher(*security);
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(listen, ServerCredentialsFor(*security), &port);
  builder.RegisterService(&launcher);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::cerr << "rdv-launcher: cannot listen on '" << listen << "' (in use or not local?)\n";
    return 1;
  }
  std::cout << "rdv-launcher ready " << listen.substr(0, listen.rfind(':')) << ":" << port
            << std::endl;
  int signal = 0;
  sigwait(&signals, &signal);
  server->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  launcher.StopAll();
  return 0;
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  rdv::ParseToolFlags(argc, argv, "rdv-launcher [--listen host:port]");
  return rdv::control::Run();
}
