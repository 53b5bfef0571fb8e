#include "control/worker_process.h"

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "control/security.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "control/grpc_status.h"
#include "rdv/control/worker.grpc.pb.h"

extern char** environ;

namespace rdv::control {
namespace {

// Reads one line from `fd` within `deadline`.
absl::StatusOr<std::string> ReadLine(int fd, absl::Time deadline) {
  std::string line;
  for (;;) {
    const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
    if (left_ms <= 0) return absl::DeadlineExceededError("rdv-worker did not get ready in time");
    pollfd p{fd, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left_ms));
    if (ready < 0 && errno != EINTR) return absl::InternalError(strerror(errno));
    if (ready <= 0) continue;
    char c;
    const ssize_t n = read(fd, &c, 1);
    if (n == 0) return absl::UnavailableError(absl::StrCat("rdv-worker exited before ready; got '", line, "'"));
    if (n < 0) {
      if (errno == EINTR) continue;
      return absl::InternalError(strerror(errno));
    }
    if (c == '\n') return line;
    line.push_back(c);
  }
}

// The caller's environment with `changes` applied, as "NAME=value" strings.
std::vector<std::string> ChildEnvironment(const EnvChanges& changes) {
  std::map<std::string, std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string text = *entry;
    const size_t equals = text.find('=');
    if (equals != std::string::npos) variables[text.substr(0, equals)] = text.substr(equals + 1);
  }
  for (const auto& [name, value] : changes) {
    if (value) {
      variables[name] = *value;
    } else {
      variables.erase(name);
    }
  }
  std::vector<std::string> result;
  for (const auto& [name, value] : variables) result.push_back(absl::StrCat(name, "=", value));
  return result;
}

std::vector<char*> NullTerminated(std::vector<std::string>& strings) {
  std::vector<char*> pointers;
  for (std::string& s : strings) pointers.push_back(s.data());
  pointers.push_back(nullptr);
  return pointers;
}

// RDV_WORKER_BINARY, else the rdv-worker of this build (a packed copy of
// the binaries, as bench/gpu/pack.sh makes, lives elsewhere).
std::string WorkerBinary() {
  const char* binary = std::getenv("RDV_WORKER_BINARY");
  return binary != nullptr && *binary != '\0' ? binary : RDV_WORKER_BINARY;
}

class ChildWorkerProcess final : public WorkerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Start(const std::vector<std::string>& args,
                                                             absl::Duration timeout,
                                                             const EnvChanges& env) {
    int pipe_fds[2];
    if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError(strerror(errno));
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
    const std::string binary = WorkerBinary();
    std::vector<std::string> argv_strings = {binary};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    // A parent killed before it stops the worker leaves none behind.
    argv_strings.push_back(absl::StrCat("--parent_pid=", getpid()));
    std::vector<std::string> env_strings = ChildEnvironment(env);
    std::vector<char*> argv = NullTerminated(argv_strings);
    std::vector<char*> envp = NullTerminated(env_strings);
    auto process = std::unique_ptr<ChildWorkerProcess>(new ChildWorkerProcess());
    const int spawned =
        posix_spawn(&process->pid_, binary.c_str(), &actions, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&actions);
    close(pipe_fds[1]);
    process->stdout_fd_ = pipe_fds[0];
    if (spawned != 0) {
      process->pid_ = -1;
      return absl::InternalError(
          absl::StrCat("posix_spawn ", binary, ": ", strerror(spawned)));
    }
    RDV_ASSIGN_OR_RETURN(const std::string line,
                         ReadLine(process->stdout_fd_, absl::Now() + timeout));
    RDV_RETURN_IF_ERROR(process->ParseReadyLine(line));
    return process;
  }

  ~ChildWorkerProcess() override {
    Stop();
    if (stdout_fd_ >= 0) close(stdout_fd_);
  }

  pid_t pid() const override { return pid_; }

  void Kill() override {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

  int Stop() override {
    if (pid_ <= 0) return 0;
    // A pidfd becomes readable when the process exits: a bounded wait.
    const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, pid_, 0));
    kill(pid_, SIGTERM);
    pollfd p{pidfd, POLLIN, 0};
    if (pidfd < 0 || poll(&p, 1, 20000) != 1) kill(pid_, SIGKILL);
    if (pidfd >= 0) close(pidfd);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  absl::Status Signal(int signal) override {
    if (signal == SIGKILL) {
      Kill();
      return absl::OkStatus();
    }
    if (pid_ <= 0) return absl::FailedPreconditionError("the worker was already reaped");
    if (kill(pid_, signal) != 0) return absl::InternalError(strerror(errno));
    return absl::OkStatus();
  }

 private:
  ChildWorkerProcess() = default;
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
};

// Every call is bounded: a launcher that went away fails it, it never hangs.
constexpr absl::Duration kLauncherCallLimit = absl::Seconds(30);

class LaunchedWorkerProcess final : public WorkerProcess {
 public:
  static absl::StatusOr<std::unique_ptr<WorkerProcess>> Launch(
      const std::string& launcher, const std::vector<std::string>& args, absl::Duration timeout,
      const EnvChanges& env) {
    RDV_ASSIGN_OR_RETURN(const SecurityOptions security, SecurityOptions::FromEnvironment());
    auto process = std::unique_ptr<LaunchedWorkerProcess>(new LaunchedWorkerProcess());
    process->launcher_address_ = launcher;
    process->stub_ = LauncherService::NewStub(
        CreateMemberChannel(launcher, security, grpc::ChannelArguments()));
    StartWorkerRequest request;
    for (const std::string& arg : args) request.add_args(arg);
    for (const auto& [name, value] : env) {
      if (value) {
        (*request.mutable_set_env())[name] = *value;
      } else {
        request.add_unset_env(name);
      }
    }
    request.set_ready_timeout_ms(absl::ToInt64Milliseconds(timeout));
    StartWorkerResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + timeout + kLauncherCallLimit));
    RDV_RETURN_IF_ERROR(process->Annotate(
        FromGrpcStatus(process->stub_->StartWorker(&context, request, &response))));
    process->worker_id_ = response.worker_id();
    process->SetIdentity(response.worker_name(), response.address(), response.incarnation());
    return process;
  }

  ~LaunchedWorkerProcess() override { Stop(); }

  pid_t pid() const override { return -1; }

  void Kill() override {
    if (worker_id_ == 0) return;
    (void)Signal(SIGKILL);
    worker_id_ = 0;
  }

  int Stop() override {
    if (worker_id_ == 0) return 0;
    StopWorkerRequest request;
    request.set_worker_id(worker_id_);
    worker_id_ = 0;
    StopWorkerResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kLauncherCallLimit));
    const grpc::Status status = stub_->StopWorker(&context, request, &response);
    // Not a clean exit when the launcher cannot say.
    return status.ok() ? response.wait_status() : -1;
  }

  absl::Status Signal(int signal) override {
    if (worker_id_ == 0) return absl::FailedPreconditionError("the worker was already reaped");
    SignalWorkerRequest request;
    request.set_worker_id(worker_id_);
    request.set_signal(signal);
    SignalWorkerResponse response;
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kLauncherCallLimit));
    return Annotate(FromGrpcStatus(stub_->SignalWorker(&context, request, &response)));
  }

 private:
  LaunchedWorkerProcess() = default;

  absl::Status Annotate(const absl::Status& status) const {
    if (status.ok()) return status;
    return absl::Status(status.code(), absl::StrCat("rdv-launcher at ", launcher_address_, ": ",
                                                    status.message()));
  }

  std::string launcher_address_;
  std::unique_ptr<LauncherService::Stub> stub_;
  uint64_t worker_id_ = 0;  // 0: none (never started, or reaped)
};

}  // namespace

absl::StatusOr<int> FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::InternalError(absl::StrCat("socket: ", strerror(errno)));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const int error = errno;
  close(fd);
  if (!ok) return absl::InternalError(absl::StrCat("bind 127.0.0.1:0: ", strerror(error)));
  return ntohs(address.sin_port);
}

absl::StatusOr<std::vector<std::unique_ptr<WorkerProcess>>> StartLocalCluster(
    int count, const std::vector<std::string>& args, absl::Duration timeout,
    std::string* cluster, const std::vector<EnvChanges>& task_env) {
  std::vector<std::string> addresses;
  for (int task = 0; task < count; ++task) {
    RDV_ASSIGN_OR_RETURN(const int port, FreeLoopbackPort());
    addresses.push_back(absl::StrCat("127.0.0.1:", port));
  }
  const std::string spec = absl::StrCat("worker=", absl::StrJoin(addresses, ","));
  std::vector<std::unique_ptr<WorkerProcess>> workers;
  for (int task = 0; task < count; ++task) {
    std::vector<std::string> worker_args = {absl::StrCat("--task=", task),
                                            absl::StrCat("--cluster=", spec)};
    worker_args.insert(worker_args.end(), args.begin(), args.end());
    RDV_ASSIGN_OR_RETURN(std::unique_ptr<WorkerProcess> worker,
                         WorkerProcess::Start(worker_args, timeout,
                                              task < static_cast<int>(task_env.size())
                                                  ? task_env[task]
                                                  : EnvChanges{}));
    workers.push_back(std::move(worker));
  }
  *cluster = spec;
  return workers;
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::vector<std::string>& args, absl::Duration timeout, const EnvChanges& env) {
  return ChildWorkerProcess::Start(args, timeout, env);
}

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Launch(
    const std::string& launcher, const std::vector<std::string>& args, absl::Duration timeout,
    const EnvChanges& env) {
  return LaunchedWorkerProcess::Launch(launcher, args, timeout, env);
}

absl::Status WorkerProcess::ParseReadyLine(const std::string& line) {
  const std::vector<std::string> words = absl::StrSplit(line, ' ');
  uint64_t incarnation = 0;
  if (words.size() != 6 || words[1] != "ready" || !absl::SimpleHexAtoi(words[5], &incarnation)) {
    return absl::InternalError(absl::StrCat("unexpected ready line '", line, "'"));
  }
  SetIdentity(words[2], words[3], incarnation);
  return absl::OkStatus();
}

void WorkerProcess::SetIdentity(std::string worker_name, std::string address,
                                uint64_t incarnation) {
  worker_name_ = std::move(worker_name);
  address_ = std::move(address);
  incarnation_ = incarnation;
}

}  // namespace rdv::control
