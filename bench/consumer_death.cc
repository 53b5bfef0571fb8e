// Consumer death, trial after trial: a producer worker (a long-lived child
// rdv-worker, task 0) holds a large tensor for a consumer worker (task 1, a
// child rdv-worker started again on the same port every trial) that asked
// for it in one message and never released or fetched it; the consumer is
// then killed (SIGKILL). Every trial the producer must let go of what it
// held within RDV_PEER_TIMEOUT_MS, not at a step cleanup, and must not grow:
// its open fds, threads and proportional set size (Pss) are printed after
// the first trials and after the last.
//   rdv_consumer_death [--trials N] [--bytes B] [--only NAME]
// What is held: a value kept for the consumer's fetch_held call (grpc, and
// grpc+ucx where it sends with tags), or a buffer lent for a get (grpc+ucx
// with RDV_UCX_OP=get). A tagged send to a lost consumer is tested in the
// conformance suite (ConsumerLostFreesWhatTheProducerHeldForIt).
#include <signal.h>

#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "apps/tool_flags.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "bench/death_trials.h"
#include "control/security.h"
#include "rdv/control/worker.grpc.pb.h"
#include "control/worker_process.h"
#include "core/dtype.h"
#include "core/rendezvous_key.h"

ABSL_FLAG(int, trials, 100, "trials per setting");
ABSL_FLAG(int64_t, bytes, int64_t{256} << 20, "bytes of the tensor held each trial");
ABSL_FLAG(std::string, only, "", "run only the settings whose name contains this");

namespace rdv::control {
namespace {

using bench::kConsumerCpu;
using bench::kProducerCpu;
using bench::kWarmTrials;
using bench::Setting;

constexpr int kPeerTimeoutMs = 2000;
constexpr absl::Duration kStartLimit = absl::Seconds(30);
constexpr absl::Duration kFreeLimit = absl::Seconds(60);

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

std::unique_ptr<grpc::ClientContext> Bounded(absl::Duration limit) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + limit));
  return context;
}

// The producer's driver and worker services, as the harness drives them.
class Producer {
 public:
  Producer(std::unique_ptr<WorkerProcess> process, std::string protocol)
      : process_(std::move(process)),
        protocol_(std::move(protocol)),
        channel_(CreateMemberChannel(process_->address(), SecurityOptions{},
                                     grpc::ChannelArguments())),
        driver_(DriverService::NewStub(channel_)),
        worker_(WorkerService::NewStub(channel_)) {}

  pid_t pid() const { return process_->pid(); }

  absl::StatusOr<HoldingsResponse> Holdings() {
    HoldingsResponse holdings;
    RDV_RETURN_IF_ERROR(
        FromGrpc(driver_->Holdings(Bounded(kStartLimit).get(), HoldingsRequest(), &holdings),
                 "Holdings"));
    return holdings;
  }

  // Produces `bytes` for the consumer and asks for them as the consumer
  // would, in one message, without ever fetching or releasing them.
  absl::Status HoldFor(int64_t step, int64_t bytes) {
    const std::string key =
        CreateRendezvousKey(kProducerCpu, process_->incarnation(), kConsumerCpu, "held");
    ProduceRequest produce;
    produce.set_step_id(step);
    ProduceItem* item = produce.add_items();
    item->set_rendezvous_key(key);
    item->set_dtype(static_cast<int>(DType::kUInt8));
    item->add_dims(bytes);
    ProduceResponse produced;
    RDV_RETURN_IF_ERROR(
        FromGrpc(driver_->Produce(Bounded(kStartLimit).get(), produce, &produced), "Produce"));
    RecvTensorRequest request;
    request.set_step_id(step);
    request.set_rendezvous_key(key);
    request.set_request_id(step);
    request.set_protocol(protocol_);
    request.set_single_message(true);
    std::unique_ptr<grpc::ClientContext> context = Bounded(kStartLimit);
    auto reader = worker_->RecvTensor(context.get(), request);
    RecvTensorChunk chunk;
    while (reader->Read(&chunk)) {
    }
    return FromGrpc(reader->Finish(), "RecvTensor");
  }

  absl::Status Cleanup(int64_t step) {
    CleanupStepRequest request;
    request.set_step_id(step);
    CleanupStepResponse response;
    return FromGrpc(worker_->CleanupStep(Bounded(kStartLimit).get(), request, &response),
                    "CleanupStep");
  }

 private:
  std::unique_ptr<WorkerProcess> process_;
  const std::string protocol_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<DriverService::Stub> driver_;
  std::unique_ptr<WorkerService::Stub> worker_;
};

uint64_t HeldInAll(const HoldingsResponse& holdings) {
  return holdings.transfers() + holdings.sends() + holdings.values() + holdings.cuda_ipc_lent();
}

// Polls the producer until `done` holds, within `limit`.
absl::StatusOr<bool> PollHoldings(Producer& producer, absl::Duration limit,
                                  const std::function<bool(const HoldingsResponse&)>& done) {
  const absl::Time end = absl::Now() + limit;
  while (true) {
    RDV_ASSIGN_OR_RETURN(const HoldingsResponse holdings, producer.Holdings());
    if (done(holdings)) return true;
    if (absl::Now() > end) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
}

// One trial: the time from the kill until the producer held nothing, or
// nullopt when it still held something after kFreeLimit.
absl::StatusOr<std::optional<absl::Duration>> Trial(Producer& producer,
                                                    const std::vector<std::string>& consumer_args,
                                                    const EnvChanges& env, int64_t step,
                                                    int64_t bytes) {
  RDV_ASSIGN_OR_RETURN(std::unique_ptr<WorkerProcess> consumer,
                       WorkerProcess::Start(consumer_args, kStartLimit, env));
  RDV_RETURN_IF_ERROR(producer.HoldFor(step, bytes));
  RDV_ASSIGN_OR_RETURN(const bool watched,
                       PollHoldings(producer, kStartLimit, [](const HoldingsResponse& held) {
                         return HeldInAll(held) == 1 && held.watched_workers_reached() == 1;
                       }));
  if (!watched) return absl::DeadlineExceededError("the producer never watched its consumer");
  consumer->Kill();
  const absl::Time killed = absl::Now();
  RDV_ASSIGN_OR_RETURN(const bool freed,
                       PollHoldings(producer, kFreeLimit, [](const HoldingsResponse& held) {
                         return HeldInAll(held) == 0;
                       }));
  const absl::Duration after_kill = absl::Now() - killed;
  RDV_RETURN_IF_ERROR(producer.Cleanup(step));
  if (!freed) return std::nullopt;
  return after_kill;
}

int RunSetting(const Setting& setting, int trials, int64_t bytes) {
  const EnvChanges env = {
      {"UCX_TLS", setting.ucx_tls ? std::optional<std::string>(setting.ucx_tls) : std::nullopt},
      {"RDV_UCX_OP", setting.ucx_op ? std::optional<std::string>(setting.ucx_op) : std::nullopt},
      {"RDV_PEER_TIMEOUT_MS", std::to_string(kPeerTimeoutMs)}};
  absl::StatusOr<int> port = FreeLoopbackPort();
  if (!port.ok()) {
    std::cerr << setting.name << ": " << port.status() << "\n";
    return 1;
  }
  const std::string consumer_address = absl::StrCat("127.0.0.1:", *port);
  absl::StatusOr<std::unique_ptr<WorkerProcess>> started = WorkerProcess::Start(
      {"--task=0", "--enable_driver", "--listen=127.0.0.1:0",
       absl::StrCat("--protocol=", setting.protocol),
       absl::StrCat("--cluster=worker=127.0.0.1:1,", consumer_address)},
      kStartLimit, env);
  if (!started.ok()) {
    std::cout << setting.name << ": skipped (" << started.status() << ")\n";
    return 0;
  }
  const std::vector<std::string> consumer_args = {
      "--task=1", absl::StrCat("--listen=", consumer_address),
      absl::StrCat("--protocol=", setting.protocol),
      absl::StrCat("--cluster=worker=", (*started)->address(), ",", consumer_address)};
  Producer producer(*std::move(started), setting.protocol);
  int freed = 0, kept = 0;
  std::vector<double> ms;
  bench::Footprint warm;
  const absl::Time began = absl::Now();
  for (int trial = 1; trial <= trials; ++trial) {
    absl::StatusOr<std::optional<absl::Duration>> outcome =
        Trial(producer, consumer_args, env, trial, bytes);
    if (!outcome.ok()) {
      std::cerr << setting.name << ": trial " << trial << ": " << outcome.status() << "\n";
      return 1;
    }
    if (outcome->has_value()) {
      ++freed;
      ms.push_back(absl::ToDoubleMilliseconds(**outcome));
    } else {
      ++kept;
      std::cerr << setting.name << ": trial " << trial << ": still held "
                << absl::FormatDuration(kFreeLimit) << " after the kill\n";
    }
    if (trial == std::min(kWarmTrials, trials)) warm = bench::MeasureFootprint(producer.pid());
    if (trial % 10 == 0) {
      const bench::Footprint now = bench::MeasureFootprint(producer.pid());
      std::cerr << setting.name << ": " << trial << " trials, "
                << absl::FormatDuration(absl::Now() - began) << ", producer fds " << now.fds
                << ", threads " << now.threads << ", Pss " << now.pss_kib / 1024 << " MiB\n";
    }
  }
  const bench::Footprint last = bench::MeasureFootprint(producer.pid());
  std::cout << absl::StrFormat("| %s | %d | %d | %d | %s | %d -> %d | %d -> %d | %.1f -> %.1f |\n",
                               setting.name, trials, freed, kept, bench::Quantiles(ms), warm.fds,
                               last.fds, warm.threads, last.threads, warm.pss_kib / 1024.0,
                               last.pss_kib / 1024.0);
  return kept == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  rdv::ParseToolFlags(argc, argv,
                      "rdv_consumer_death [--trials N]: consumers killed while their producer "
                      "holds data (docs/robustness.md)");
  std::cout << "| setting | trials | freed | still held | kill to freed p50 / p90 / max [ms] "
               "| producer fds | threads | Pss [MiB] |\n"
               "|---|---|---|---|---|---|---|---|\n";
  int failed = 0;
  const std::string only = absl::GetFlag(FLAGS_only);
  for (const rdv::bench::Setting& setting : rdv::bench::kSettings) {
    if (setting.needs_rdma || (!only.empty() && !absl::StrContains(setting.name, only))) continue;
    failed |= rdv::control::RunSetting(setting, absl::GetFlag(FLAGS_trials),
                                       absl::GetFlag(FLAGS_bytes));
  }
  return failed;
}
