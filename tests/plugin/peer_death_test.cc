// A peer process that exits while a transfer still reads its memory: the
// transfer ends (failed with UNAVAILABLE or CANCELLED, or done with the
// right bytes), this process lives on, and it still moves bytes with a
// new peer. Debian's UCX 1.13 aborted the receiver of a tagged send over
// shared memory: cma's process_vm_readv failing with ESRCH is fatal to
// UCX where the endpoint has no peer-failure handling, which UCX's posix
// transport cannot give (the ucx plugin now keeps the process).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "tests/plugin/transport_conformance.h"
#include "tests/test_util.h"

extern char** environ;

namespace rdv::plugin::conformance {
namespace {

constexpr size_t kLength = size_t{256} << 20;  // long enough to be mid-transfer at the exit
constexpr uint64_t kTag = 7;                    // rdv_transport_peer's

// rdv_transport_peer, its standard input and descriptor 3 piped here.
class PeerProcess {
 public:
  ~PeerProcess() {
    CloseInput();
    if (output_ >= 0) close(output_);
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // mode: serve or send (see transport_peer_main.cc).
  absl::Status Start(const std::string& parameter, const char* mode) {
    int in[2], out[2];
    if (pipe2(in, O_CLOEXEC) != 0 || pipe2(out, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
    }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, out[1], 3);
    const std::string length = std::to_string(kLength);
    std::vector<char*> argv = {const_cast<char*>(RDV_TRANSPORT_PEER),
                               const_cast<char*>(parameter.c_str()),
                               const_cast<char*>(length.c_str()), const_cast<char*>(mode),
                               nullptr};
    const int spawned =
        posix_spawn(&pid_, RDV_TRANSPORT_PEER, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    close(in[0]);
    close(out[1]);
    input_ = in[1];
    output_ = out[0];
    if (spawned != 0) {
      pid_ = -1;
      return absl::InternalError(absl::StrCat("posix_spawn: ", strerror(spawned)));
    }
    return absl::OkStatus();
  }

  absl::Status WriteLine(const std::string& text) {
    const std::string line = text + "\n";
    if (write(input_, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
      return absl::InternalError(absl::StrCat("write: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  // The `count` lines it writes, waiting at most 30 s for them.
  absl::StatusOr<std::vector<std::string>> ReadLines(int count) {
    std::string text;
    while (std::count(text.begin(), text.end(), '\n') < count) {
      pollfd wait{output_, POLLIN, 0};
      if (poll(&wait, 1, 30'000) != 1) return absl::DeadlineExceededError("the peer is silent");
      char buffer[4096];
      const ssize_t n = read(output_, buffer, sizeof buffer);
      if (n <= 0) return absl::UnavailableError("the peer exited before it spoke");
      text.append(buffer, n);
    }
    return std::vector<std::string>(absl::StrSplit(text, '\n', absl::SkipEmpty()));
  }

  // Kills it (SIGKILL: nothing of it runs after this) and reaps it.
  absl::Status Kill() {
    const pid_t pid = std::exchange(pid_, -1);
    if (kill(pid, SIGKILL) != 0 || waitpid(pid, nullptr, 0) != pid) {
      return absl::InternalError(absl::StrCat("kill or waitpid: ", strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  void CloseInput() {
    if (input_ >= 0) close(input_);
    input_ = -1;
  }

  pid_t pid_ = -1;
  int input_ = -1;
  int output_ = -1;
};

bool HoldsThePeersPattern(const TransportMemory& memory) {
  const auto* bytes = static_cast<const unsigned char*>(memory.address());
  for (size_t i = 0; i < memory.length(); i += 4093) {
    if (bytes[i] != static_cast<unsigned char>(i * 7 + 1)) return false;
  }
  return true;
}

// The first byte has landed: the transfer is under way. Read through the
// kernel (/proc/self/mem), unseen by the sanitizers: the transport writes
// the destination under no lock this test could share.
bool Started(const TransportMemory& memory) {
  static const int self = open("/proc/self/mem", O_RDONLY | O_CLOEXEC);
  unsigned char first = 0;
  return pread(self, &first, 1, reinterpret_cast<off_t>(memory.address())) == 1 && first == 1;
}

// A transfer that ended early ended with one of these.
void ExpectLost(const absl::Status& status) {
  EXPECT_TRUE(absl::IsUnavailable(status) || absl::IsCancelled(status)) << status;
}

class PeerDeathTest : public ::testing::TestWithParam<std::string> {
 protected:
  // Starts a sending peer; the receiver connects to it too, as rdv's
  // workers do (UCX then treats a failure on it as the application's).
  static void StartSender(const Transport& receiver, PeerProcess& peer,
                          std::unique_ptr<TransportEndpoint>& endpoint) {
    ASSERT_TRUE(peer.Start(GetParam(), "send").ok());
    absl::StatusOr<std::vector<std::string>> lines = peer.ReadLines(1);
    ASSERT_TRUE(lines.ok()) << lines.status();
    auto connected = receiver.Connect(absl::HexStringToBytes(lines->front()));
    ASSERT_TRUE(connected.ok()) << connected.status();
    endpoint = *std::move(connected);
    ASSERT_TRUE(peer.WriteLine(absl::BytesToHexString(*receiver.LocalAddress())).ok());
  }

  // A tagged send from a new peer, received whole: the process still serves.
  void ExpectANewPeersSendArrives(const Transport& receiver) {
    auto destination = receiver.Allocate(kLength);
    ASSERT_TRUE(destination.ok()) << destination.status();
    Completion recv;
    receiver.Recv((*destination)->address(), kLength, kTag, recv.Callback());
    PeerProcess peer;
    std::unique_ptr<TransportEndpoint> endpoint;
    StartSender(receiver, peer, endpoint);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(recv.Wait()) << "after a lost peer, a new peer's send never arrives";
    ASSERT_TRUE(recv.status.ok()) << recv.status;
    EXPECT_TRUE(HoldsThePeersPattern(**destination));
  }
};

// rdv aborts the endpoint of a peer its control plane saw die and cancels
// the Recv, unless the transport failed it first.
TEST_P(PeerDeathTest, ASenderThatExitsMidSendEndsTheRecvAndNotThisProcess) {
  RDV_LOAD_OR_SKIP(receiver, GetParam());
  int ended_early = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt));
    auto destination = receiver->Allocate(kLength);
    ASSERT_TRUE(destination.ok()) << destination.status();
    std::memset((*destination)->address(), 0, kLength);
    Completion recv;
    receiver->Recv((*destination)->address(), kLength, kTag, recv.Callback());
    PeerProcess peer;
    std::unique_ptr<TransportEndpoint> endpoint;
    StartSender(*receiver, peer, endpoint);
    if (HasFatalFailure()) return;
    ASSERT_TRUE(testing::PollUntil(
        [&] { return Started(**destination) || recv.done.HasBeenNotified(); }));
    ASSERT_TRUE(peer.Kill().ok());
    if (!recv.done.HasBeenNotified()) {
      endpoint->Abort();
      (void)receiver->CancelRecv(kTag);
    }
    ASSERT_TRUE(recv.Wait()) << "a Recv from a sender that exited hangs";
    EXPECT_EQ(recv.calls.load(), 1);
    if (recv.status.ok()) {
      EXPECT_TRUE(HoldsThePeersPattern(**destination));
    } else {
      ExpectLost(recv.status);
      ++ended_early;
    }
  }
  EXPECT_GT(ended_early, 0) << "no send was still under way when its peer exited: untried";
  ExpectANewPeersSendArrives(*receiver);
}

// rdv aborts the endpoint of a peer its control plane saw die, unless the
// transport failed the get first.
TEST_P(PeerDeathTest, AServerThatExitsMidGetEndsTheGetAndNotThisProcess) {
  if (GetParam().find("posix") != std::string::npos) {
    GTEST_SKIP() << "a get over UCX's posix transport without memory=mapped is served by the "
                    "peer's progress thread, and UCX 1.13 cannot end it or close its endpoint "
                    "when that peer is lost (docs/robustness.md, gets forced over shared memory)";
  }
  RDV_LOAD_OR_SKIP(reader, GetParam());
  int ended_early = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    SCOPED_TRACE(absl::StrCat("attempt ", attempt));
    PeerProcess peer;
    ASSERT_TRUE(peer.Start(GetParam(), "serve").ok());
    absl::StatusOr<std::vector<std::string>> lines = peer.ReadLines(3);
    ASSERT_TRUE(lines.ok()) << lines.status();
    ASSERT_EQ(lines->size(), 3u);
    uint64_t remote = 0;
    ASSERT_TRUE(absl::SimpleAtoi((*lines)[1], &remote));
    const std::string key = absl::HexStringToBytes((*lines)[2]);
    auto endpoint = reader->Connect(absl::HexStringToBytes((*lines)[0]));
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    auto destination = reader->Allocate(kLength);
    ASSERT_TRUE(destination.ok()) << destination.status();
    // Wired up while the peer lives, as rdv's endpoints are before a tensor moves.
    Completion warm;
    reader->Get(**endpoint, (*destination)->address(), **destination, remote, key, 4096,
                warm.Callback());
    ASSERT_TRUE(warm.Wait());
    ASSERT_TRUE(warm.status.ok()) << warm.status;

    Completion get;
    reader->Get(**endpoint, (*destination)->address(), **destination, remote, key, kLength,
                get.Callback());
    ASSERT_TRUE(peer.Kill().ok());
    if (!get.done.HasBeenNotified()) (*endpoint)->Abort();
    ASSERT_TRUE(get.Wait()) << "a get from a peer that exited hangs after its endpoint's abort";
    EXPECT_EQ(get.calls.load(), 1);
    if (get.status.ok()) {
      EXPECT_TRUE(HoldsThePeersPattern(**destination));
    } else {
      ExpectLost(get.status);
      ++ended_early;
    }
  }
  // A mapped segment outlives its owner, so those gets may all succeed.
  if (GetParam().find("memory=mapped") == std::string::npos) {
    EXPECT_GT(ended_early, 0) << "no get was still reading when its peer exited: untried";
  }
  ExpectANewPeersSendArrives(*reader);
}

INSTANTIATE_TEST_SUITE_P(Ucx, PeerDeathTest,
                         ::testing::Values("ucx:tls=posix,cma,self", "ucx:tls=tcp",
                                           "ucx:memory=mapped"),
                         ParameterName);

}  // namespace
}  // namespace rdv::plugin::conformance
