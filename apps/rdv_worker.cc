// rdv-worker: one worker process of a cluster. Serves the worker service
// until SIGINT or SIGTERM (or, with --parent_pid, until that parent is
// gone), then cleans up every step and exits.
//
// When it is ready it prints one line on stdout, which scripts and test
// fixtures wait for:
//   rdv-worker ready /job:worker/replica:0/task:0 127.0.0.1:40123 incarnation 1f2e...
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include <unistd.h>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "apps/heap_retention.h"
#include "apps/tool_flags.h"
#include "control/worker_server.h"
#include "core/logging.h"
#include "plugin/transport.h"

ABSL_FLAG(std::string, job, "worker", "job name of this worker");
ABSL_FLAG(int, task, 0, "task index of this worker within its job");
ABSL_FLAG(std::string, listen, "",
          "host:port to listen on (port 0 picks a free one); default: this task's address "
          "in the cluster");
ABSL_FLAG(std::string, cluster, "", "cluster as job=host:port,host:port[;job=...]");
ABSL_FLAG(std::string, cluster_file, "",
          "cluster as a JSON file: {\"worker\": [\"host:port\", ...]}");
ABSL_FLAG(std::string, protocol, "grpc",
          "grpc, or grpc+<transport> (grpc+ucx) to move payloads through a transport plugin");
ABSL_FLAG(std::string, transport_settings, "",
          "settings of the data-plane transport as name=value;name=value (`rdv-worker "
          "--list_transport_settings=ucx` lists them); one left out is read from its variable");
ABSL_FLAG(std::string, list_transport_settings, "",
          "print the settings transport NAME takes (its variable, default, meaning) and exit");
ABSL_FLAG(bool, enable_driver, false,
          "serve DriverService, so that tests and benchmarks can make this worker Send");
ABSL_FLAG(std::string, tls_cert, "",
          "this worker's TLS certificate (PEM); with --tls_key and --tls_ca turns on mutual TLS "
          "(default: $RDV_TLS_CERT)");
ABSL_FLAG(std::string, tls_key, "", "the certificate's private key (default: $RDV_TLS_KEY)");
ABSL_FLAG(std::string, tls_ca, "",
          "the cluster's CA certificate: callers must show a certificate it signed (default: "
          "$RDV_TLS_CA)");
ABSL_FLAG(std::string, cluster_token_file, "",
          "a file whose first line is the cluster token every call must carry (default: "
          "$RDV_CLUSTER_TOKEN_FILE, else the token in $RDV_CLUSTER_TOKEN)");
ABSL_FLAG(bool, allow_insecure, false,
          "listen on a non-loopback address without TLS and a token (or RDV_ALLOW_INSECURE=1): "
          "anyone who reaches the port can then read and inject tensors");
ABSL_FLAG(int, parent_pid, 0,
          "shut down once this process is no longer the parent (whoever spawns the worker "
          "sets it, so that a parent killed without cleaning up leaves no worker behind)");

ABSL_FLAG(std::string, metrics_file, "",
          "write this worker's counters (docs/stats.md) in Prometheus' text format to this "
          "file every --metrics_interval_s, replacing it whole (node_exporter's textfile "
          "collector reads *.prom files of a directory)");
ABSL_FLAG(int, metrics_interval_s, 15, "seconds between two writes of --metrics_file");

namespace {

// Writes --metrics_file now, then every interval until destroyed, and once
// more then. Each write replaces the file whole (a rename), so a reader
// never sees half of one.
class MetricsWriter {
 public:
  static absl::StatusOr<std::unique_ptr<MetricsWriter>> Start(
      const rdv::control::WorkerServer& server, std::string path, absl::Duration interval) {
    auto writer = std::unique_ptr<MetricsWriter>(new MetricsWriter(server, std::move(path)));
    RDV_RETURN_IF_ERROR(writer->Write());
    writer->thread_ = std::thread([raw = writer.get(), interval] {
      while (!raw->stop_.WaitForNotificationWithTimeout(interval)) {
        if (absl::Status written = raw->Write(); !written.ok()) {
          std::cerr << "rdv-worker: " << written << "\n";
        }
      }
    });
    return writer;
  }

  ~MetricsWriter() {
    stop_.Notify();
    thread_.join();
    Write().IgnoreError();
  }

 private:
  MetricsWriter(const rdv::control::WorkerServer& server, std::string path)
      : server_(server), path_(std::move(path)) {}

  absl::Status Write() const {
    const std::string partial = path_ + ".partial";
    {
      std::ofstream out(partial, std::ios::trunc);
      out << server_.StatsAsPrometheus();
      if (!out) {
        return absl::InvalidArgumentError(absl::StrCat("--metrics_file: cannot write ", partial));
      }
    }
    if (std::rename(partial.c_str(), path_.c_str()) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("--metrics_file: cannot rename ", partial,
                                                     " to ", path_, ": ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

  const rdv::control::WorkerServer& server_;
  const std::string path_;
  absl::Notification stop_;
  std::thread thread_;
};

// Checks once a second: a parent that dies makes init (or a subreaper)
// the parent. SIGTERM then takes the ordinary way out, through sigwait.
void ShutDownWhenOrphaned(pid_t parent) {
  std::thread([parent] {
    while (getppid() == parent) absl::SleepFor(absl::Seconds(1));
    std::cerr << "rdv-worker: parent process " << parent << " is gone; shutting down\n";
    kill(getpid(), SIGTERM);
  }).detach();
}

absl::StatusOr<rdv::control::ClusterSpec> ReadCluster() {
  const std::string flag = absl::GetFlag(FLAGS_cluster);
  const std::string file = absl::GetFlag(FLAGS_cluster_file);
  if (!flag.empty() && !file.empty()) {
    return absl::InvalidArgumentError("give --cluster or --cluster_file, not both");
  }
  if (!file.empty()) return rdv::control::ClusterSpec::FromJsonFile(file);
  if (!flag.empty()) return rdv::control::ClusterSpec::FromFlag(flag);
  return absl::InvalidArgumentError("--cluster or --cluster_file is required");
}

// The door's settings: `from_environment`, read again only when a flag
// names a file in place of its variable's.
absl::StatusOr<rdv::control::SecurityOptions> ReadSecurity(
    rdv::control::SecurityOptions from_environment) {
  rdv::control::SecurityFiles files = rdv::control::SecurityFiles::FromEnvironment();
  bool flagged = false;
  for (auto [flag, file] : {std::pair{&FLAGS_tls_cert, &files.tls_cert},
                            std::pair{&FLAGS_tls_key, &files.tls_key},
                            std::pair{&FLAGS_tls_ca, &files.tls_ca},
                            std::pair{&FLAGS_cluster_token_file, &files.token_file}}) {
    if (std::string value = absl::GetFlag(*flag); !value.empty()) {
      *file = std::move(value);
      flagged = true;
    }
  }
  rdv::control::SecurityOptions security = std::move(from_environment);
  if (flagged) {
    RDV_ASSIGN_OR_RETURN(security, rdv::control::SecurityOptions::Load(files));
  }
  if (absl::GetFlag(FLAGS_allow_insecure)) security.allow_insecure = true;
  return security;
}

absl::StatusOr<rdv::plugin::TransportSettings> ParseTransportSettings(absl::string_view text) {
  rdv::plugin::TransportSettings settings;
  for (absl::string_view item : absl::StrSplit(text, ';', absl::SkipWhitespace())) {
    const std::pair<absl::string_view, absl::string_view> pair =
        absl::StrSplit(item, absl::MaxSplits('=', 1));
    if (pair.first.empty() || !absl::StrContains(item, '=')) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--transport_settings: '", item, "' is not name=value (separate settings with ';')"));
    }
    settings[std::string(pair.first)] = std::string(pair.second);
  }
  return settings;
}

// Prints what transport `name` takes, as ucx_info -c lists UCX's.
absl::Status ListTransportSettings(absl::string_view name) {
  RDV_ASSIGN_OR_RETURN(std::vector<rdv::plugin::TransportSetting> settings,
                       rdv::plugin::Transport::ListSettings(name));
  std::cout << "# the settings of transport " << name
            << " (--transport_settings=name=value;..., or the variable)\n";
  for (const rdv::plugin::TransportSetting& setting : settings) {
    std::cout << setting.name << "  " << setting.environment << "  default '"
              << setting.default_value << "'"
              << (setting.value.empty() ? "" : ", now '" + setting.value + "'") << "\n    "
              << setting.description << "\n";
  }
  return absl::OkStatus();
}

// A worker asked to stop exits within a bound, even with a transfer stuck
// on a peer that neither answers nor has been declared lost yet.
void ExitIfStuckAfter(absl::Duration limit) {
  std::thread([limit] {
    absl::SleepFor(limit);
    RDV_LOG(Error) << "rdv-worker: still shutting down after " << absl::FormatDuration(limit)
                   << " (RDV_SHUTDOWN_TIMEOUT_MS): exiting with transfers unfinished";
    std::_Exit(1);
  }).detach();
}

absl::Status Run() {
  RDV_ASSIGN_OR_RETURN(rdv::control::WorkerServerOptions options,
                       rdv::control::WorkerServerOptions::FromEnvironment());
  options.job = absl::GetFlag(FLAGS_job);
  options.task = absl::GetFlag(FLAGS_task);
  options.enable_driver = absl::GetFlag(FLAGS_enable_driver);
  options.protocol = absl::GetFlag(FLAGS_protocol);
  RDV_ASSIGN_OR_RETURN(options.data_plane.transport_settings,
                       ParseTransportSettings(absl::GetFlag(FLAGS_transport_settings)));
  RDV_ASSIGN_OR_RETURN(options.cluster, ReadCluster());
  RDV_ASSIGN_OR_RETURN(options.control.security, ReadSecurity(options.control.security));
  options.listen_address = absl::GetFlag(FLAGS_listen);
  if (options.listen_address.empty()) {
    RDV_ASSIGN_OR_RETURN(options.listen_address,
                         options.cluster.AddressOf(
                             rdv::control::ClusterSpec::WorkerName(options.job, options.task)));
  }

  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  // Blocked before gRPC starts its threads, so that only sigwait sees them.
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const absl::Duration shutdown_timeout = options.control.shutdown_timeout;
  const absl::Duration metrics_interval = absl::Seconds(absl::GetFlag(FLAGS_metrics_interval_s));
  if (metrics_interval < absl::Seconds(1)) {
    return absl::InvalidArgumentError("--metrics_interval_s must be at least 1");
  }
  RDV_ASSIGN_OR_RETURN(auto server, rdv::control::WorkerServer::Start(std::move(options)));
  // Written once before the ready line, so that its readers find it.
  std::unique_ptr<MetricsWriter> metrics;
  if (const std::string path = absl::GetFlag(FLAGS_metrics_file); !path.empty()) {
    RDV_ASSIGN_OR_RETURN(metrics, MetricsWriter::Start(*server, path, metrics_interval));
  }
  std::cout << "rdv-worker ready " << server->worker_name() << " " << server->address()
            << " incarnation " << rdv::FormatIncarnation(server->incarnation())
            << std::endl;
  if (const int parent = absl::GetFlag(FLAGS_parent_pid); parent > 0) ShutDownWhenOrphaned(parent);
  int signal = 0;
  sigwait(&signals, &signal);
  ExitIfStuckAfter(shutdown_timeout);
  metrics.reset();  // a last write, while the data plane it reads still exists
  server->Shutdown();
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  rdv::KeepFreedHeap();
  rdv::ParseToolFlags(argc, argv,
                      "rdv-worker --cluster worker=h:p,h:p --task N [--enable_driver]");
  // Standard output carries the ready line its parent waits for; UCX, loaded
  // later with the transport plugin, would print its warnings there.
  setenv("UCX_LOG_FILE", "stderr", /*overwrite=*/0);
  // Debian's Abseil checks every absl::Mutex acquisition for deadlock cycles
  // under a global lock, gRPC's included; a program may turn that off.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::string listed = absl::GetFlag(FLAGS_list_transport_settings);
  const absl::Status status = listed.empty() ? Run() : ListTransportSettings(listed);
  if (!status.ok()) {
    std::cerr << "rdv-worker: " << status << "\n";
    return 1;
  }
  return 0;
}
