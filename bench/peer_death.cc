// Peer death, trial after trial: a consumer worker (this process) receives
// a large tensor from a producer worker (a child rdv-worker, connected by
// a first small tensor), which is killed (SIGKILL) while the bytes move. Every trial must end its Recv
// with UNAVAILABLE within RDV_PEER_TIMEOUT_MS, and the consumer must not
// grow: its open fds, threads and proportional set size (Pss) are printed
// after the first trials and after the last.
//   rdv_peer_death [--trials N] [--bytes B] [--only NAME]
//                  [--ib_device D --peer_ib_device P]
// Runs grpc, grpc+ucx over tcp and over shared memory (tagged, the
// default there); --only "shm, gets" forces gets over shared memory
// (RDV_UCX_OP=get), which is not in the default run: docs/robustness.md.
// With an RDMA device (the SoftRoCE guest: tests/softroce/softroce-vm),
// also grpc+verbs and grpc+ucx over rc_verbs, the producer on another
// device than this process.
#include <signal.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "apps/tool_flags.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/death_trials.h"
#include "control/data_plane.h"
#include "control/security.h"
#include "control/worker_cache.h"
#include "control/worker_process.h"
#include "control/worker_server.h"
#include "core/notification.h"

ABSL_FLAG(int, trials, 100, "trials per setting");
ABSL_FLAG(int64_t, bytes, int64_t{256} << 20, "bytes of the tensor each trial moves");
ABSL_FLAG(std::string, only, "", "run only the settings whose name contains this");
ABSL_FLAG(std::string, ib_device, "rxe0", "RDMA settings: this process's device");
ABSL_FLAG(std::string, peer_ib_device, "rxe1", "RDMA settings: the producer's device");

namespace rdv::control {
namespace {

using bench::kConsumerCpu;
using bench::kProducerCpu;
using bench::kWarmTrials;
using bench::Setting;

constexpr absl::Duration kPeerTimeout = absl::Seconds(2);

bool HaveRdmaDevice() {
  std::error_code error;
  return !std::filesystem::is_empty("/sys/class/infiniband", error) && !error;
}

// The RDMA settings' devices: this process on --ib_device, the producer on
// --peer_ib_device, so that the bytes cross the wire between the two.
void AddRdmaDevices(EnvChanges* producer_env) {
  const std::string device = absl::GetFlag(FLAGS_ib_device);
  const std::string peer = absl::GetFlag(FLAGS_peer_ib_device);
  setenv("RDV_IB_DEVICE", device.c_str(), 1);
  setenv("UCX_NET_DEVICES", absl::StrCat(device, ":1").c_str(), 1);
  setenv("UCX_UD_VERBS_ETH_DGID_CHECK", "n", 1);
  producer_env->emplace_back("RDV_IB_DEVICE", peer);
  producer_env->emplace_back("UCX_NET_DEVICES", absl::StrCat(peer, ":1"));
  producer_env->emplace_back("UCX_UD_VERBS_ETH_DGID_CHECK", "n");
}

struct Outcome {
  absl::Status status;
  absl::Duration after_kill;
};

absl::StatusOr<Outcome> Trial(WorkerServer& consumer, const EnvChanges& env, int64_t step,
                              int64_t bytes) {
  RDV_ASSIGN_OR_RETURN(
      std::unique_ptr<WorkerProcess> producer,
      WorkerProcess::Start({"--task=0", "--enable_driver", "--listen=127.0.0.1:0",
                            absl::StrCat("--protocol=", consumer.data_plane() != nullptr
                                                            ? consumer.data_plane()->protocol()
                                                            : "grpc"),
                            absl::StrCat("--cluster=worker=127.0.0.1:1,", consumer.address())},
                           absl::Seconds(30), env));
  consumer.worker_cache().SetAddress("worker", 0, producer->address());
  auto driver = DriverService::NewStub(CreateMemberChannel(
      producer->address(), SecurityOptions{}, grpc::ChannelArguments()));
  const std::string key =
      CreateRendezvousKey(kProducerCpu, producer->incarnation(), kConsumerCpu, "big");
  const std::string warm_key =
      CreateRendezvousKey(kProducerCpu, producer->incarnation(), kConsumerCpu, "warm");
  ProduceRequest produce;
  produce.set_step_id(step);
  for (const auto& [name, size] : {std::pair{&warm_key, int64_t{1} << 20}, {&key, bytes}}) {
    ProduceItem* item = produce.add_items();
    item->set_rendezvous_key(*name);
    item->set_dtype(static_cast<int>(DType::kUInt8));
    item->add_dims(size);
  }
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  ProduceResponse produced;
  if (grpc::Status status = driver->Produce(&context, produce, &produced); !status.ok()) {
    return absl::InternalError(absl::StrCat("Produce: ", status.error_message()));
  }
  // The connection is made first: Debian's UCX 1.13 aborts the process when
  // a peer dies during a tcp endpoint's wireup (docs/robustness.md).
  Tensor warm;
  bool is_dead = false;
  RDV_RETURN_IF_ERROR(consumer.rendezvous_mgr().Find(step)->Recv(
      *ParsedKey::Parse(warm_key), {}, &warm, &is_dead, absl::Seconds(30)));
  Notification done;
  absl::Status received;
  consumer.rendezvous_mgr().Find(step)->RecvAsync(
      *ParsedKey::Parse(key), {},
      [&](const absl::Status& status, const RendezvousArgs&, const RendezvousArgs&, const Tensor&,
          bool) {
        received = status;
        done.Notify();
      });
  // Killed while the bytes move: on the data plane once a fetch is in
  // flight; over grpc, a moment into the stream.
  DataPlane* plane = consumer.data_plane();
  const absl::Time limit = absl::Now() + absl::Seconds(30);
  if (plane == nullptr) {
    done.WaitForNotificationWithTimeout(absl::Milliseconds(20));
  } else {
    while (plane->fetches_in_flight() == 0 && !done.HasBeenNotified() && absl::Now() < limit) {
      absl::SleepFor(absl::Microseconds(100));
    }
  }
  producer->Kill();
  const absl::Time killed = absl::Now();
  if (!done.WaitForNotificationWithTimeout(absl::Seconds(60))) {
    return absl::DeadlineExceededError(absl::StrCat(
        "the Recv did not end within 60 s of the kill (fetches the transport still holds: ",
        plane == nullptr ? 0 : plane->fetches_in_flight(), ")"));
  }
  Outcome outcome{received, absl::Now() - killed};
  consumer.rendezvous_mgr().Cleanup(step);
  return outcome;
}

int RunSetting(const Setting& setting, int trials, int64_t bytes) {
  setting.ucx_tls ? setenv("UCX_TLS", setting.ucx_tls, 1) : unsetenv("UCX_TLS");
  setting.ucx_op ? setenv("RDV_UCX_OP", setting.ucx_op, 1) : unsetenv("RDV_UCX_OP");
  EnvChanges env = {{"UCX_TLS", setting.ucx_tls ? std::optional<std::string>(setting.ucx_tls)
                                                : std::nullopt},
                    {"RDV_UCX_OP", setting.ucx_op ? std::optional<std::string>(setting.ucx_op)
                                                  : std::nullopt}};
  if (setting.needs_rdma) {
    if (!HaveRdmaDevice()) {
      std::cout << setting.name << ": skipped (no RDMA device; run it in tests/softroce/softroce-vm)\n";
      return 0;
    }
    AddRdmaDevices(&env);
  }
  WorkerServerOptions options;
  options.task = 1;
  options.listen_address = "127.0.0.1:0";
  options.protocol = setting.protocol;
  options.cluster = *ClusterSpec::FromFlag("worker=127.0.0.1:1,127.0.0.1:1");
  options.control.peer_timeout = kPeerTimeout;
  absl::StatusOr<std::unique_ptr<WorkerServer>> consumer = WorkerServer::Start(options);
  if (!consumer.ok()) {
    std::cout << setting.name << ": skipped (" << consumer.status() << ")\n";
    return 0;
  }
  (*consumer)->worker_cache().SetAddress("worker", 1, (*consumer)->address());
  int unavailable = 0, finished = 0, other = 0;
  std::vector<double> ms;
  bench::Footprint warm;
  const absl::Time started = absl::Now();
  for (int trial = 1; trial <= trials; ++trial) {
    absl::StatusOr<Outcome> outcome = Trial(**consumer, env, trial, bytes);
    if (!outcome.ok()) {
      std::cerr << setting.name << ": trial " << trial << ": " << outcome.status() << "\n";
      return 1;
    }
    if (outcome->status.ok()) {
      ++finished;
    } else if (absl::IsUnavailable(outcome->status)) {
      ++unavailable;
      ms.push_back(absl::ToDoubleMilliseconds(outcome->after_kill));
    } else {
      ++other;
      std::cerr << setting.name << ": trial " << trial << ": " << outcome->status << "\n";
    }
    if (trial == std::min(kWarmTrials, trials)) warm = bench::MeasureFootprint();
    if (trial % 10 == 0) {
      const bench::Footprint now = bench::MeasureFootprint();
      std::cerr << setting.name << ": " << trial << " trials, " << absl::FormatDuration(absl::Now() - started)
                << ", fds " << now.fds << ", threads " << now.threads << ", Pss " << now.pss_kib / 1024 << " MiB\n";
    }
  }
  const bench::Footprint last = bench::MeasureFootprint();
  std::cout << absl::StrFormat(
      "| %s | %d | %d | %d | %d | %s | %d -> %d | %d -> %d | %.1f -> %.1f |\n", setting.name,
      trials, unavailable, finished, other, bench::Quantiles(ms), warm.fds, last.fds,
      warm.threads, last.threads, warm.pss_kib / 1024.0, last.pss_kib / 1024.0);
  return other == 0 && unavailable + finished == trials ? 0 : 1;
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  rdv::ParseToolFlags(argc, argv,
                      "rdv_peer_death [--trials N]: producers killed mid-transfer "
                      "(docs/robustness.md)");
  std::cout << "| setting | trials | UNAVAILABLE | done before the kill | other | kill to "
               "UNAVAILABLE p50 / p90 / max [ms] | fds | threads | Pss [MiB] |\n"
               "|---|---|---|---|---|---|---|---|---|\n";
  int failed = 0;
  for (const rdv::bench::Setting& setting : rdv::bench::kSettings) {
    const std::string only = absl::GetFlag(FLAGS_only);
    const bool forced_gets = setting.protocol == std::string("grpc+ucx") && setting.ucx_op;
    if (only.empty() ? forced_gets : !absl::StrContains(setting.name, only)) continue;
    failed |= rdv::control::RunSetting(setting, absl::GetFlag(FLAGS_trials),
                                       absl::GetFlag(FLAGS_bytes));
  }
  return failed;
}
