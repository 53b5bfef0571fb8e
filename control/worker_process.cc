#include "control/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

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

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::vector<std::string>& args, absl::Duration timeout) {
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) return absl::InternalError(strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  std::vector<std::string> argv_strings = {RDV_WORKER_BINARY};
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& s : argv_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  auto process = std::unique_ptr<WorkerProcess>(new WorkerProcess());
  const int spawned =
      posix_spawn(&process->pid_, RDV_WORKER_BINARY, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  process->stdout_fd_ = pipe_fds[0];
  if (spawned != 0) {
    process->pid_ = -1;
    return absl::InternalError(absl::StrCat("posix_spawn " RDV_WORKER_BINARY ": ", strerror(spawned)));
  }
  RDV_ASSIGN_OR_RETURN(const std::string line, ReadLine(process->stdout_fd_, absl::Now() + timeout));
  // rdv-worker ready <name> <address> incarnation <hex>
  const std::vector<std::string> words = absl::StrSplit(line, ' ');
  if (words.size() != 6 || words[1] != "ready" ||
      !absl::SimpleHexAtoi(words[5], &process->incarnation_)) {
    return absl::InternalError(absl::StrCat("unexpected ready line '", line, "'"));
  }
  process->worker_name_ = words[2];
  process->address_ = words[3];
  return process;
}

WorkerProcess::~WorkerProcess() {
  Stop();
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

void WorkerProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

int WorkerProcess::Stop() {
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

}  // namespace rdv::control
