// Two processes of this program move a tensor through rdv: the parent is
// worker task 0 and Sends a 1 MiB float tensor on step 1; the child is task
// 1 and Recvs it over PROTOCOL (first argument: grpc, grpc+ucx or
// grpc+verbs; default grpc+ucx), then checks every element. The parent
// tells the child its address and incarnation through a pipe, since keys
// name the producer's incarnation. Exits 0 when the child got the tensor
// intact, 1 otherwise.
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "control/worker_server.h"
#include "core/rendezvous_key.h"

namespace {

using rdv::control::ClusterSpec;
using rdv::control::WorkerServer;
using rdv::control::WorkerServerOptions;

constexpr int64_t kStep = 1;
constexpr int64_t kRows = 256;
constexpr int64_t kColumns = 1024;
constexpr absl::Duration kRecvLimit = absl::Seconds(30);
constexpr int kChildLimitMs = 60'000;

std::string KeyFor(uint64_t producer_incarnation) {
  return rdv::CreateRendezvousKey("/job:worker/replica:0/task:0/device:CPU:0",
                                  producer_incarnation,
                                  "/job:worker/replica:0/task:1/device:CPU:0", "embed_edge");
}

float ValueAt(int64_t i) { return static_cast<float>(i % 1000) * 0.5f; }

absl::StatusOr<std::unique_ptr<WorkerServer>> StartWorker(int task, const std::string& protocol,
                                                          const std::string& cluster) {
  absl::StatusOr<WorkerServerOptions> options = WorkerServerOptions::FromEnvironment();
  if (!options.ok()) return options.status();
  options->task = task;
  options->protocol = protocol;
  options->listen_address = "127.0.0.1:0";
  absl::StatusOr<ClusterSpec> spec = ClusterSpec::FromFlag(cluster);
  if (!spec.ok()) return spec.status();
  options->cluster = *std::move(spec);
  return WorkerServer::Start(*std::move(options));
}

absl::Status Produce(const std::string& protocol, int to_child, int from_child) {
  absl::StatusOr<std::unique_ptr<WorkerServer>> worker =
      StartWorker(0, protocol, "worker=127.0.0.1:1,127.0.0.1:1");
  if (!worker.ok()) return worker.status();
  absl::StatusOr<rdv::TensorShape> shape = rdv::TensorShape::Create({kRows, kColumns});
  absl::StatusOr<rdv::Tensor> tensor =
      rdv::Tensor::Allocate(rdv::HostAllocator(), rdv::DType::kFloat, *shape);
  if (!tensor.ok()) return tensor.status();
  for (int64_t i = 0; i < tensor->num_elements(); ++i) tensor->flat<float>()[i] = ValueAt(i);
  absl::StatusOr<rdv::ParsedKey> key = rdv::ParsedKey::Parse(KeyFor((*worker)->incarnation()));
  if (!key.ok()) return key.status();
  absl::Status sent = (*worker)->rendezvous_mgr().Find(kStep)->Send(*key, {}, *tensor, false);
  if (!sent.ok()) return sent;
  const std::string hello =
      absl::StrCat((*worker)->address(), " ", (*worker)->incarnation(), "\n");
  if (write(to_child, hello.data(), hello.size()) != static_cast<ssize_t>(hello.size())) {
    return absl::InternalError("cannot write to the consumer's pipe");
  }
  // The producer serves until the consumer says it is done (or exits).
  pollfd done{from_child, POLLIN, 0};
  if (poll(&done, 1, kChildLimitMs) != 1) {
    return absl::DeadlineExceededError("the consumer did not finish within 60 s");
  }
  return absl::OkStatus();
}

absl::Status Consume(const std::string& protocol, int from_parent) {
  char line[256] = {};
  ssize_t length = read(from_parent, line, sizeof(line) - 1);
  if (length <= 0) return absl::UnavailableError("the producer never said where it listens");
  char address[200] = {};
  unsigned long long incarnation = 0;
  if (std::sscanf(line, "%199s %llu", address, &incarnation) != 2) {
    return absl::InvalidArgumentError(absl::StrCat("cannot parse the producer's line: ", line));
  }
  absl::StatusOr<std::unique_ptr<WorkerServer>> worker =
      StartWorker(1, protocol, absl::StrCat("worker=", address, ",127.0.0.1:1"));
  if (!worker.ok()) return worker.status();
  absl::StatusOr<rdv::ParsedKey> key = rdv::ParsedKey::Parse(KeyFor(incarnation));
  if (!key.ok()) return key.status();
  rdv::Tensor value;
  bool is_dead = false;
  absl::Status received =
      (*worker)->rendezvous_mgr().Find(kStep)->Recv(*key, {}, &value, &is_dead, kRecvLimit);
  if (!received.ok()) return received;
  if (value.num_elements() != kRows * kColumns || value.dtype() != rdv::DType::kFloat) {
    return absl::DataLossError(absl::StrCat("received ", value.DebugString()));
  }
  for (int64_t i = 0; i < value.num_elements(); ++i) {
    if (value.flat<float>()[i] != ValueAt(i)) {
      return absl::DataLossError(absl::StrCat("element ", i, " differs"));
    }
  }
  std::cout << "received " << value.DebugString() << " over " << protocol << " from "
            << address << ": every element as sent\n";
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string protocol = argc > 1 ? argv[1] : "grpc+ucx";
  int to_child[2];
  int from_child[2];
  if (pipe(to_child) != 0 || pipe(from_child) != 0) return 1;
  // Fork before either process starts a thread.
  const pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(to_child[1]);
    close(from_child[0]);
    const absl::Status status = Consume(protocol, to_child[0]);
    if (!status.ok()) std::cerr << "consumer: " << status << "\n";
    const char verdict = status.ok() ? 'y' : 'n';
    if (write(from_child[1], &verdict, 1) != 1) return 1;
    return status.ok() ? 0 : 1;
  }
  close(to_child[0]);
  close(from_child[1]);
  const absl::Status status = Produce(protocol, to_child[1], from_child[0]);
  if (!status.ok()) {
    std::cerr << "producer: " << status << "\n";
    kill(child, SIGKILL);
  }
  int child_status = 0;
  waitpid(child, &child_status, 0);
  return status.ok() && WIFEXITED(child_status) && WEXITSTATUS(child_status) == 0 ? 0 : 1;
}
