// The Rendezvous conformance suite (tests/core/rendezvous_conformance.h) on
// RpcRemoteRendezvous. Each case's rendezvous is one step between two
// workers of this process: the producer (task 0, where the keys' source
// device is) and the consumer (task 1). Send goes to the producer's
// rendezvous of the step; Recv to the consumer's, which fetches over the
// protocol; an abort reaches both, as a step's abort does; destroying the
// rendezvous cancels the step on both, as a worker's owner would.
#include <cstdlib>
#include <memory>

#include "absl/strings/str_cat.h"
#include "control/rpc_remote_rendezvous.h"
#include "control/worker_server.h"
#include "core/rendezvous_key.h"
#include "tests/core/rendezvous_conformance.h"

namespace rdv::conformance {
namespace {

using control::RpcRemoteRendezvous;
using control::WorkerServer;
using control::WorkerServerOptions;

constexpr int64_t kStep = 1;

class CrossWorkerRendezvous final : public Rendezvous {
 public:
  // Null, with a test failure, when a worker does not start.
  static std::unique_ptr<Rendezvous> Make(const char* protocol, const char* ucx_tls) {
    auto made = std::unique_ptr<CrossWorkerRendezvous>(new CrossWorkerRendezvous);
    made->producer_ = StartWorker(protocol, 0, ucx_tls);
    made->consumer_ = StartWorker(protocol, 1, ucx_tls);
    if (made->producer_ == nullptr || made->consumer_ == nullptr) return nullptr;
    for (WorkerServer* worker : {made->producer_.get(), made->consumer_.get()}) {
      worker->worker_cache().SetAddress("worker", 0, made->producer_->address());
      worker->worker_cache().SetAddress("worker", 1, made->consumer_->address());
    }
    return made;
  }

  ~CrossWorkerRendezvous() override {
    if (consumer_ != nullptr) {
      consumer_->rendezvous_mgr().Find(kStep)->StartAbort(
          absl::CancelledError("the step's rendezvous was destroyed"));
    }
  }

  absl::Status Send(const ParsedKey& key, const RendezvousArgs& args, const Tensor& value,
                    bool is_dead) override {
    return producer_->rendezvous_mgr().Find(kStep)->Send(Produced(key), args, value, is_dead);
  }
  void RecvAsync(const ParsedKey& key, const RendezvousArgs& args,
                 RecvDoneCallback done) override {
    consumer_->rendezvous_mgr().Find(kStep)->RecvAsync(Produced(key), args, std::move(done));
  }
  absl::Status Recv(const ParsedKey& key, const RendezvousArgs& args, Tensor* value,
                    bool* is_dead, absl::Duration timeout) override {
    return consumer_->rendezvous_mgr().Find(kStep)->Recv(Produced(key), args, value, is_dead,
                                                         timeout);
  }
  void StartAbort(const absl::Status& status) override {
    consumer_->rendezvous_mgr().Find(kStep)->StartAbort(status);
    producer_->rendezvous_mgr().Find(kStep)->StartAbort(status);
  }

  // Recvs the consumer has in flight to the producer.
  size_t Waiters() {
    return static_cast<RpcRemoteRendezvous&>(*consumer_->rendezvous_mgr().Find(kStep))
        .CountRemoteCalls();
  }

 private:
  CrossWorkerRendezvous() = default;

  static std::unique_ptr<WorkerServer> StartWorker(const char* protocol, int task,
                                                   const char* ucx_tls) {
    WorkerServerOptions options;
    options.task = task;
    options.protocol = protocol;
    if (ucx_tls != nullptr) options.data_plane.transport_settings["tls"] = ucx_tls;
    options.cluster = *control::ClusterSpec::FromFlag("worker=127.0.0.1:1,127.0.0.1:1");
    absl::StatusOr<std::unique_ptr<WorkerServer>> worker = WorkerServer::Start(options);
    EXPECT_TRUE(worker.ok()) << worker.status();
    return worker.ok() ? *std::move(worker) : nullptr;
  }

  // The suite's key with the producer's incarnation, which a remote Recv
  // checks.
  ParsedKey Produced(const ParsedKey& key) const {
    return *ParsedKey::Parse(absl::StrCat(key.src_device(), ";",
                                          FormatIncarnation(producer_->incarnation()), ";",
                                          key.dst_device(), ";", key.tensor_name(), ";",
                                          key.frame_iter()));
  }

  // The consumer goes first: its calls end before the producer does.
  std::unique_ptr<WorkerServer> producer_;
  std::unique_ptr<WorkerServer> consumer_;
};

Backend Between2Workers(const char* name, const char* protocol, const char* ucx_tls) {
  return Backend{name, [=] { return CrossWorkerRendezvous::Make(protocol, ucx_tls); },
                 [](Rendezvous& r) { return static_cast<CrossWorkerRendezvous&>(r).Waiters(); },
                 /*recvs_of_one_key_in_order=*/false,
                 /*cancelled_recv_may_take_a_value=*/true};
}

INSTANTIATE_TEST_SUITE_P(Protocols, RendezvousConformanceTest,
                         ::testing::Values(Between2Workers("grpc", "grpc", nullptr),
                                           Between2Workers("grpc_ucx_tcp", "grpc+ucx", "tcp"),
                                           Between2Workers("grpc_ucx_shm", "grpc+ucx",
                                                           "posix,cma,self")),
                         BackendName);

}  // namespace
}  // namespace rdv::conformance
