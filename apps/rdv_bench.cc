// rdv-bench: Send -> Recv bandwidth and latency between two worker
// processes, over any protocol rdv speaks, in the manner of perftest.
//
//   rdv-bench --local --protocol grpc+ucx --sizes 4K:64M      # spawns its peer
//   rdv-bench --server --listen 0.0.0.0:18515 --protocol grpc+verbs
//   rdv-bench --client host:18515 --protocol grpc+verbs --json out.json
//
// The peer (the producer) Sends tensors filled with a known pattern; this
// process Recvs them, times each Recv, and checks them unless --no_verify:
// every byte of the warm-up windows and of the last one, after the timed
// loop, and 64 blocks of 256 bytes of every other tensor in the loop (a
// longer pause there would let a read-ahead's transfers go on untimed).
// A mismatch is an error, never a figure. Results go to stdout as a table, and to --json / --csv /
// --plot (a PNG drawn by gnuplot) when asked.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "apps/bench_results.h"
#include "apps/bench_session.h"
#include "apps/compare_script.h"
#include "apps/cpu_placement.h"
#include "apps/heap_retention.h"
#include "apps/tool_flags.h"
#include "control/worker_server.h"
#include "core/cuda.h"

ABSL_FLAG(bool, local, false, "spawn the peer worker on 127.0.0.1 and measure against it");
ABSL_FLAG(bool, server, false, "be the peer: serve Sends until SIGINT/SIGTERM");
ABSL_FLAG(std::string, client, "", "measure against the --server at HOST:PORT");
ABSL_FLAG(std::string, listen, "0.0.0.0:18515", "with --server: host:port to listen on");
ABSL_FLAG(std::string, protocol, "grpc+ucx", "grpc, grpc+ucx or grpc+verbs");
ABSL_FLAG(std::string, subject, "rdv",
          "rdv (Send -> Recv over --protocol), or grpc-raw: the reference, a bytes payload in a "
          "unary gRPC call with the same channel settings");
ABSL_FLAG(std::string, sizes, "4K:64M",
          "tensor sizes in bytes: a doubling range LOW:HIGH, or a list A,B,C (K, M, G suffixes)");
ABSL_FLAG(int, iters, 0, "Recvs per size (0: enough for 256 MiB, 5 to 1000)");
ABSL_FLAG(double, time_s, 0, "seconds per size instead of a count (0: use --iters)");
ABSL_FLAG(int, warmup, 3,
          "untimed Recvs per size first, in whole windows of --in_flight, after two more "
          "windows unless 0: a recurring key's first window takes RecvTensor (the key is not "
          "known yet) and its second pays for the fast path's first use (the transport's "
          "endpoint wireup, milliseconds). The Recvs after them warm the fast path itself: "
          "over UCX's shared memory its first 64 messages each way are slower (the first pass "
          "of a 64-entry queue, UCX_POSIX_FIFO_SIZE). Unless 0, warm-up goes on until the "
          "consumer's pool has registered nothing new for 3 windows and as many as the values "
          "read ahead fill (at most 30 windows): a fresh destination's first touch costs up to "
          "200 ms per 64 MiB on a virtual machine, and a destination read ahead is first "
          "touched windows after it was registered");
ABSL_FLAG(int, in_flight, 1, "Recvs in flight at once");
ABSL_FLAG(std::string, memory, "host",
          "where tensors live on both sides: host, or cuda (GPU 0 of each process; between "
          "processes of one host they cross by CUDA IPC unless RDV_CUDA_IPC=0)");
ABSL_FLAG(std::string, direction, "pull", "pull (the consumer reads); push is not built yet");
ABSL_FLAG(std::string, keys, "recurring",
          "recurring: every Recv of a size takes the next value of one key (a training loop's "
          "steady state: the fast path serves it); first: every Recv is of a key never "
          "received before (RecvTensor, the first exchange of each key); reshaped: one key "
          "whose values alternate between shapes [n] and [1, n] of the same bytes, so that each "
          "value has another shape than the last (the fast path asks for it again)");
ABSL_FLAG(int, cpu, -1,
          "run this process on this CPU only (-1: where the scheduler puts it). Benchmarks "
          "of two processes on a small machine pin each to its own CPU, as ucx_perftest -c "
          "does: left to the scheduler, where their threads land sets small-message latency");
ABSL_FLAG(int, peer_cpu, -1, "with --local: run the peer on this CPU only (-1: unpinned)");
ABSL_FLAG(bool, no_verify, false, "skip checking the received bytes");
ABSL_FLAG(bool, stats, false,
          "after the run, print the counters of both ends (as rdv-stat does): which path "
          "carried the bytes, what was registered (docs/stats.md)");
ABSL_FLAG(std::string, json, "", "write the results as JSON to this file");
ABSL_FLAG(std::string, csv, "", "write the results as CSV to this file");
ABSL_FLAG(std::string, plot, "", "draw bandwidth against size to this PNG (needs gnuplot)");

namespace rdv::control {
namespace {

using bench::ParseSizes;
using bench::PrintRow;
using bench::Row;
using bench::TransportEnv;

BenchOptions OptionsOfFlags() {
  BenchOptions options;
  options.protocol = absl::GetFlag(FLAGS_protocol);
  options.local = absl::GetFlag(FLAGS_local);
  options.client = absl::GetFlag(FLAGS_client);
  options.raw_grpc = absl::GetFlag(FLAGS_subject) == "grpc-raw";
  options.first_keys = absl::GetFlag(FLAGS_keys) == "first";
  options.reshaped_keys = absl::GetFlag(FLAGS_keys) == "reshaped";
  options.cuda_memory = absl::GetFlag(FLAGS_memory) == "cuda";
  options.iters = absl::GetFlag(FLAGS_iters);
  options.time_s = absl::GetFlag(FLAGS_time_s);
  options.warmup = absl::GetFlag(FLAGS_warmup);
  options.in_flight = absl::GetFlag(FLAGS_in_flight);
  options.cpu = absl::GetFlag(FLAGS_cpu);
  options.peer_cpu = absl::GetFlag(FLAGS_peer_cpu);
  options.verify = !absl::GetFlag(FLAGS_no_verify);
  return options;
}

absl::Status ServeUntilSignal() {
  RDV_ASSIGN_OR_RETURN(WorkerServerOptions options, WorkerServerOptions::FromEnvironment());
  options.task = 0;
  options.enable_driver = true;
  options.protocol = absl::GetFlag(FLAGS_protocol);
  options.listen_address = absl::GetFlag(FLAGS_listen);
  RDV_ASSIGN_OR_RETURN(options.cluster,
                       ClusterSpec::FromFlag(absl::StrCat("worker=", options.listen_address)));
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  RDV_ASSIGN_OR_RETURN(const cpu_set_t allowed, CpusAllowedFor(absl::GetFlag(FLAGS_cpu), -1));
  RDV_RETURN_IF_ERROR(PinThreadTo(absl::GetFlag(FLAGS_cpu), allowed));
  RDV_ASSIGN_OR_RETURN(std::unique_ptr<WorkerServer> server, WorkerServer::Start(options));
  std::printf("rdv-bench server %s on %s; stop with Ctrl-C\n", options.protocol.c_str(),
              server->address().c_str());
  std::fflush(stdout);
  int signal = 0;
  sigwait(&signals, &signal);
  return absl::OkStatus();
}

absl::Status CheckFlags() {
  const int modes = absl::GetFlag(FLAGS_local) + absl::GetFlag(FLAGS_server) +
                    !absl::GetFlag(FLAGS_client).empty();
  if (modes != 1) return absl::InvalidArgumentError("give exactly one of --local, --server, --client");
  const std::string protocol = absl::GetFlag(FLAGS_protocol);
  if (protocol != "grpc" && protocol != "grpc+ucx" && protocol != "grpc+verbs") {
    return absl::InvalidArgumentError(
        absl::StrCat("--protocol '", protocol, "': use grpc, grpc+ucx or grpc+verbs"));
  }
  const std::string subject = absl::GetFlag(FLAGS_subject);
  if (subject != "rdv" && subject != "grpc-raw") {
    return absl::InvalidArgumentError(absl::StrCat("--subject '", subject, "': use rdv or grpc-raw"));
  }
  if (subject == "grpc-raw" && absl::GetFlag(FLAGS_in_flight) != 1) {
    return absl::InvalidArgumentError("--subject grpc-raw makes one call at a time (--in_flight 1)");
  }
  if (absl::GetFlag(FLAGS_direction) != "pull") {
    return absl::UnimplementedError("--direction push is not built yet: rdv pulls (the consumer reads)");
  }
  if (absl::GetFlag(FLAGS_memory) != "host" && absl::GetFlag(FLAGS_memory) != "cuda") {
    return absl::InvalidArgumentError("--memory: use host or cuda");
  }
  if (absl::GetFlag(FLAGS_memory) == "cuda" && cuda::DeviceCount() == 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("--memory cuda: ", cuda::UnavailableReason()));
  }
  if (absl::GetFlag(FLAGS_keys) != "recurring" && absl::GetFlag(FLAGS_keys) != "first" &&
      absl::GetFlag(FLAGS_keys) != "reshaped") {
    return absl::InvalidArgumentError("--keys: use recurring, first or reshaped");
  }
  if (absl::GetFlag(FLAGS_peer_cpu) != -1 && !absl::GetFlag(FLAGS_local)) {
    return absl::InvalidArgumentError("--peer_cpu pins the peer that --local spawns; pin a "
                                      "--server with its own --cpu");
  }
  if (absl::GetFlag(FLAGS_in_flight) < 1 || absl::GetFlag(FLAGS_warmup) < 0) {
    return absl::InvalidArgumentError("--in_flight must be >= 1 and --warmup >= 0");
  }
  return absl::OkStatus();
}

absl::Status Run() {
  RDV_RETURN_IF_ERROR(CheckFlags());
  if (absl::GetFlag(FLAGS_server)) return ServeUntilSignal();
  RDV_ASSIGN_OR_RETURN(const std::vector<int64_t> sizes, ParseSizes(absl::GetFlag(FLAGS_sizes)));
  BenchSession bench(OptionsOfFlags());
  RDV_RETURN_IF_ERROR(bench.Connect());
  const std::string env = TransportEnv(absl::GetFlag(FLAGS_protocol));
  std::printf("rdv-bench: %s %s%s%s, %s memory, %s keys, %d in flight, %s%s\n",
              absl::GetFlag(FLAGS_subject) == "grpc-raw" ? "raw unary gRPC calls on the channel of"
                                                           : "protocol",
              absl::GetFlag(FLAGS_protocol).c_str(), env.empty() ? "" : ", ", env.c_str(),
              absl::GetFlag(FLAGS_memory).c_str(), absl::GetFlag(FLAGS_keys).c_str(),
              absl::GetFlag(FLAGS_in_flight),
              absl::GetFlag(FLAGS_no_verify) ? "not verified" : "verified (in the loop: a sample)",
              bench.Placement().c_str());
  std::printf(" %-12s %-12s %-16s %-18s %-14s %-14s\n", "#bytes", "#iterations", "BW peak[GB/s]",
              "BW average[GB/s]", "lat p50[us]", "lat p99[us]");
  std::vector<Row> rows;
  for (const int64_t size : sizes) {
    if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r  measuring %lld bytes...", static_cast<long long>(size));
    RDV_ASSIGN_OR_RETURN(Row row, bench.Measure(size));
    if (isatty(STDERR_FILENO)) std::fprintf(stderr, "\r%30s\r", "");
    PrintRow(row);
    rows.push_back(row);
  }
  if (absl::GetFlag(FLAGS_stats)) {
    RDV_ASSIGN_OR_RETURN(const std::string tables, bench.StatsOfBothEnds());
    std::printf("\ncounters of both ends (docs/stats.md):\n%s", tables.c_str());
  }
  return bench::WriteResults(
      rows, {.subject = absl::GetFlag(FLAGS_subject) == "grpc-raw"
                            ? "grpc-raw"
                            : absl::StrCat("rdv:", absl::GetFlag(FLAGS_protocol)),
             .protocol = absl::GetFlag(FLAGS_protocol),
             .keys = absl::GetFlag(FLAGS_keys),
             .verified = !absl::GetFlag(FLAGS_no_verify) && absl::GetFlag(FLAGS_subject) != "grpc-raw",
             .json = absl::GetFlag(FLAGS_json),
             .csv = absl::GetFlag(FLAGS_csv),
             .plot = absl::GetFlag(FLAGS_plot)});
}

}  // namespace
}  // namespace rdv::control

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "compare") return rdv::RunCompareScript(argc, argv);
  rdv::KeepFreedHeap();
  rdv::ParseToolFlags(argc, argv,
      "Send->Recv bandwidth and latency between two rdv workers.\n"
      "  rdv-bench --local [--protocol grpc+ucx] [--sizes 4K:64M]\n"
      "  rdv-bench --server [--listen 0.0.0.0:18515] [--protocol ...]\n"
      "  rdv-bench --client HOST:PORT [--protocol ...] [--json F] [--csv F] [--plot F.png]\n"
      "  rdv-bench compare [--help]   every protocol beside ucx_perftest and raw gRPC");
  // Standard output carries the table; UCX, loaded later with the transport
  // plugin, would print its warnings there.
  setenv("UCX_LOG_FILE", "stderr", /*overwrite=*/0);
  const absl::Status status = rdv::control::Run();
  if (!status.ok()) {
    std::fprintf(stderr, "rdv-bench: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
