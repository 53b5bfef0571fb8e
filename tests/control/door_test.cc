// The door (control/security.h): a worker with a cluster token, or with
// mutual TLS and a token, refuses every RPC of a caller that is not a
// member with UNAUTHENTICATED, and serves members. Real gRPC servers on
// loopback, certificates of a real test CA (scripts/make-test-ca), and a
// real rdv-launcher.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <vector>

#include <grpcpp/create_channel.h>
#include <grpcpp/security/credentials.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "control/protocol.h"
#include "control/security.h"
#include "rdv/control/worker.grpc.pb.h"
#include "control/worker_process.h"
#include "control/worker_server.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv::control {
namespace {

using rdv::testing::kWaitLimit;

// A fresh CA and member certificate in a temporary folder.
std::string MakeTestCa() {
  char dir[] = "/tmp/rdv_door_test_XXXXXX";
  EXPECT_NE(mkdtemp(dir), nullptr);
  const std::string command = absl::StrCat(RDV_MAKE_TEST_CA, " ", dir, " >/dev/null");
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  return dir;
}

SecurityFiles FilesIn(const std::string& dir) {
  return {.token_file = dir + "/token",
          .tls_cert = dir + "/member.pem",
          .tls_key = dir + "/member.key",
          .tls_ca = dir + "/ca.pem"};
}

SecurityOptions Load(const SecurityFiles& files) {
  absl::StatusOr<SecurityOptions> security = SecurityOptions::Load(files);
  EXPECT_TRUE(security.ok()) << security.status();
  return security.ok() ? *security : SecurityOptions{};
}

// Each RPC a worker serves, called once through `channel`: name and status.
std::vector<std::pair<std::string, grpc::Status>> CallEveryRpc(
    const std::shared_ptr<grpc::Channel>& channel) {
  WorkerService::Stub worker(channel);
  DriverService::Stub driver(channel);
  std::vector<std::pair<std::string, grpc::Status>> statuses;
  auto call = [&statuses](const std::string& name,
                          const std::function<grpc::Status(grpc::ClientContext*)>& rpc) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
    statuses.emplace_back(name, rpc(&context));
  };
  call("Handshake", [&](grpc::ClientContext* c) {
    HandshakeRequest request;
    request.set_protocol_version(kProtocolVersion);
    HandshakeResponse response;
    return worker.Handshake(c, request, &response);
  });
  call("RecvTensor", [&](grpc::ClientContext* c) {
    RecvTensorRequest request;
    request.set_rendezvous_key("not a key");
    auto reader = worker.RecvTensor(c, request);
    RecvTensorChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return reader->Finish();
  });
  call("ReleaseTransfers", [&](grpc::ClientContext* c) {
    ReleaseTransfersRequest request;
    request.add_transfers()->set_transfer_id(1);
    ReleaseTransfersResponse response;
    return worker.ReleaseTransfers(c, request, &response);
  });
  call("CleanupStep", [&](grpc::ClientContext* c) {
    CleanupStepRequest request;
    CleanupStepResponse response;
    return worker.CleanupStep(c, request, &response);
  });
  call("AbortStep", [&](grpc::ClientContext* c) {
    AbortStepRequest request;
    request.set_step_id(7);
    AbortStepResponse response;
    return worker.AbortStep(c, request, &response);
  });
  call("WithdrawRecvTensor", [&](grpc::ClientContext* c) {
    WithdrawRecvTensorRequest request;
    WithdrawRecvTensorResponse response;
    return worker.WithdrawRecvTensor(c, request, &response);
  });
  call("RegisterGraph", [&](grpc::ClientContext* c) {
    RegisterGraphRequest request;
    RegisterGraphResponse response;
    return worker.RegisterGraph(c, request, &response);
  });
  call("RunGraph", [&](grpc::ClientContext* c) {
    RunGraphRequest request;
    RunGraphResponse response;
    return worker.RunGraph(c, request, &response);
  });
  call("CleanupGraph", [&](grpc::ClientContext* c) {
    CleanupGraphRequest request;
    CleanupGraphResponse response;
    return worker.CleanupGraph(c, request, &response);
  });
  call("Produce", [&](grpc::ClientContext* c) {
    ProduceRequest request;
    ProduceResponse response;
    return driver.Produce(c, request, &response);
  });
  call("FetchBytes", [&](grpc::ClientContext* c) {
    FetchBytesRequest request;
    request.set_size(16);
    FetchBytesResponse response;
    return driver.FetchBytes(c, request, &response);
  });
  return statuses;
}

void ExpectAllRefused(const std::shared_ptr<grpc::Channel>& channel, absl::string_view why) {
  for (const auto& [rpc, status] : CallEveryRpc(channel)) {
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << why << ": " << rpc << " answered " << status.error_code() << " "
        << status.error_message();
  }
}

std::shared_ptr<grpc::Channel> Plaintext(const std::string& address) {
  return grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
}

class DoorTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ca_ = new std::string(MakeTestCa());
    stranger_ca_ = new std::string(MakeTestCa());
  }
  static void TearDownTestSuite() {
    std::system(absl::StrCat("rm -rf ", *ca_, " ", *stranger_ca_).c_str());
    delete ca_;
    delete stranger_ca_;
  }

  void StartWorker(SecurityOptions security, const std::string& listen = "127.0.0.1:0") {
    WorkerServerOptions options;
    options.listen_address = listen;
    options.cluster = *ClusterSpec::FromFlag("worker=127.0.0.1:1");
    options.enable_driver = true;
    options.control.security = std::move(security);
    absl::StatusOr<std::unique_ptr<WorkerServer>> worker = WorkerServer::Start(options);
    ASSERT_TRUE(worker.ok()) << worker.status();
    worker_ = *std::move(worker);
  }

  static std::string* ca_;
  static std::string* stranger_ca_;
  std::unique_ptr<WorkerServer> worker_;
};

std::string* DoorTest::ca_ = nullptr;
std::string* DoorTest::stranger_ca_ = nullptr;

TEST_F(DoorTest, ATokenIsRequiredOnEveryRpc) {
  SecurityFiles files = FilesIn(*ca_);
  files.tls_cert = files.tls_key = files.tls_ca = "";
  const SecurityOptions member = Load(files);
  StartWorker(member);
  const std::string& address = worker_->address();
  ExpectAllRefused(Plaintext(address), "no token");
  SecurityOptions wrong = member;
  wrong.token[0] = wrong.token[0] == 'a' ? 'b' : 'a';
  ExpectAllRefused(CreateMemberChannel(address, wrong, {}), "a wrong token of the right length");
  wrong.token += "0";
  ExpectAllRefused(CreateMemberChannel(address, wrong, {}), "a longer token");
  for (const auto& [rpc, status] : CallEveryRpc(CreateMemberChannel(address, member, {}))) {
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << rpc << ": " << status.error_message();
    if (rpc == "Handshake") {
      EXPECT_TRUE(status.ok()) << status.error_message();
    }
  }
}

TEST_F(DoorTest, MutualTlsAdmitsOnlyCertificatesOfTheClusterCa) {
  const SecurityOptions member = Load(FilesIn(*ca_));
  ASSERT_TRUE(member.tls());
  StartWorker(member);
  const std::string& address = worker_->address();

  grpc::SslCredentialsOptions server_only;  // trusts the CA, shows no certificate
  server_only.pem_root_certs = member.tls_ca;
  ExpectAllRefused(grpc::CreateChannel(address, grpc::SslCredentials(server_only)),
                   "TLS without a client certificate");

  SecurityOptions no_token = member;
  no_token.token.clear();
  ExpectAllRefused(CreateMemberChannel(address, no_token, {}), "a certificate but no token");

  SecurityOptions stranger = Load(FilesIn(*stranger_ca_));
  stranger.tls_ca = member.tls_ca;  // knows whom it calls, but is not one of them
  stranger.token = member.token;
  for (const auto& [rpc, status] : CallEveryRpc(CreateMemberChannel(address, stranger, {}))) {
    EXPECT_FALSE(status.ok()) << rpc << " served a certificate of another CA";
  }
  for (const auto& [rpc, status] : CallEveryRpc(Plaintext(address))) {
    EXPECT_FALSE(status.ok()) << rpc << " served plaintext";
  }
  for (const auto& [rpc, status] : CallEveryRpc(CreateMemberChannel(address, member, {}))) {
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << rpc << ": " << status.error_message();
    if (rpc == "Handshake") {
      EXPECT_TRUE(status.ok()) << status.error_message();
    }
  }
}

TEST_F(DoorTest, AWorkerReachableFromTheNetworkNeedsTlsAndAToken) {
  WorkerServerOptions options;
  options.listen_address = "0.0.0.0:0";
  options.cluster = *ClusterSpec::FromFlag("worker=127.0.0.1:1");
  absl::StatusOr<std::unique_ptr<WorkerServer>> open = WorkerServer::Start(options);
  EXPECT_EQ(open.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(open.status().message().find("RDV_ALLOW_INSECURE"), std::string::npos)
      << open.status();

  SecurityFiles token_only = FilesIn(*ca_);
  token_only.tls_cert = token_only.tls_key = token_only.tls_ca = "";
  options.control.security = Load(token_only);
  EXPECT_EQ(WorkerServer::Start(options).status().code(), absl::StatusCode::kFailedPrecondition)
      << "a token alone travels in plaintext";

  options.control.security = Load(FilesIn(*ca_));
  EXPECT_TRUE(WorkerServer::Start(options).ok());

  options.control.security = SecurityOptions{};
  options.control.security.allow_insecure = true;
  EXPECT_TRUE(WorkerServer::Start(options).ok());
}

TEST_F(DoorTest, SettingsThatCannotWorkAreRefusedAtLoad) {
  SecurityFiles files = FilesIn(*ca_);
  files.tls_ca = "";
  EXPECT_EQ(SecurityOptions::Load(files).status().code(), absl::StatusCode::kInvalidArgument)
      << "a certificate without the CA";
  files = FilesIn(*ca_);
  files.tls_key = *ca_ + "/missing.key";
  EXPECT_EQ(SecurityOptions::Load(files).status().code(), absl::StatusCode::kInvalidArgument);
  const std::string short_token = *ca_ + "/short-token";
  std::ofstream(short_token) << "secret\n";
  files = SecurityFiles{.token_file = short_token, .tls_cert = "", .tls_key = "", .tls_ca = ""};
  const absl::Status status = SecurityOptions::Load(files).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message().find("secret"), std::string::npos) << "never echo a secret";
}

// An rdv-launcher started through a shell that prints its pid first, with
// `env` (VAR=value ...) over this environment: its pid and its output so
// far (the ready line, or why it refused to start).
struct LauncherRun {
  FILE* output = nullptr;
  pid_t pid = -1;
  std::string first_line;

  ~LauncherRun() {
    if (pid > 0) kill(pid, SIGTERM);
    if (output != nullptr) pclose(output);
  }
};

void RunLauncher(const std::string& env, const std::string& listen, LauncherRun* run) {
  const std::string command =
      absl::StrCat("sh -c 'echo $$; exec env -u RDV_CLUSTER_TOKEN_FILE -u RDV_CLUSTER_TOKEN ", env,
                   " ", RDV_LAUNCHER_BINARY, " --listen ", listen, " 2>&1'");
  run->output = popen(command.c_str(), "r");
  ASSERT_NE(run->output, nullptr);
  char line[4096];
  ASSERT_NE(fgets(line, sizeof line, run->output), nullptr);
  run->pid = std::atoi(line);
  if (fgets(line, sizeof line, run->output) != nullptr) run->first_line = line;
}

TEST(LauncherDoorTest, RefusesToStartWithoutATokenOrOnTheNetworkWithoutTls) {
  {
    LauncherRun run;
    RunLauncher("", "127.0.0.1:0", &run);
    EXPECT_NE(run.first_line.find("needs a cluster token"), std::string::npos) << run.first_line;
  }
  {
    LauncherRun run;
    RunLauncher("RDV_CLUSTER_TOKEN=0123456789abcdef0123", "0.0.0.0:0", &run);
    EXPECT_NE(run.first_line.find("reachable from other hosts"), std::string::npos)
        << run.first_line;
  }
}

TEST(LauncherDoorTest, RefusesStrangersAndSettingsOtherThanRdvsAndUcxs) {
  const std::string token = "0123456789abcdef0123";
  LauncherRun run;
  RunLauncher("RDV_CLUSTER_TOKEN=" + token, "127.0.0.1:0", &run);
  // rdv-launcher ready 127.0.0.1:PORT
  const std::vector<std::string> words = absl::StrSplit(run.first_line, absl::ByAnyChar(" \n"));
  ASSERT_GE(words.size(), 3u) << run.first_line;
  ASSERT_EQ(words[1], "ready") << run.first_line;
  const std::string launcher = words[2];

  LauncherService::Stub stranger(Plaintext(launcher));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kWaitLimit));
  StartWorkerRequest request;
  request.add_args("--help");
  StartWorkerResponse response;
  EXPECT_EQ(stranger.StartWorker(&context, request, &response).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);

  setenv("RDV_CLUSTER_TOKEN", token.c_str(), 1);  // what Launch sends
  const absl::StatusOr<std::unique_ptr<WorkerProcess>> preloaded = WorkerProcess::Launch(
      launcher, {"--task=0", "--cluster=worker=127.0.0.1:0"}, kWaitLimit,
      {{"LD_PRELOAD", "/tmp/evil.so"}});
  unsetenv("RDV_CLUSTER_TOKEN");
  EXPECT_EQ(preloaded.status().code(), absl::StatusCode::kInvalidArgument) << preloaded.status();
  EXPECT_NE(preloaded.status().message().find("LD_PRELOAD"), std::string::npos);
}

}  // namespace
}  // namespace rdv::control
