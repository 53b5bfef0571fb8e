// What the peer-death harnesses (peer_death.cc, consumer_death.cc) share:
// the settings they run, and the footprint of the worker that must not grow
// across trials.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace rdv::bench {

inline constexpr char kProducerCpu[] = "/job:worker/replica:0/task:0/device:CPU:0";
inline constexpr char kConsumerCpu[] = "/job:worker/replica:0/task:1/device:CPU:0";
// Footprints are taken after this many trials (warm caches, threads and
// pools) and again after the last.
inline constexpr int kWarmTrials = 5;

// A protocol and the environment both workers run it under.
struct Setting {
  const char* name;
  const char* protocol;
  const char* ucx_tls;  // or null
  const char* ucx_op;   // or null
  bool needs_rdma = false;
};

// grpc, grpc+ucx over tcp and shared memory (tagged, and with gets
// forced), and on an RDMA device grpc+verbs and grpc+ucx over rc_verbs.
inline constexpr Setting kSettings[] = {
    {"grpc", "grpc", nullptr, nullptr},
    {"grpc+ucx tcp", "grpc+ucx", "tcp", nullptr},
    {"grpc+ucx shm", "grpc+ucx", "posix,cma,self", nullptr},
    {"grpc+ucx shm, gets", "grpc+ucx", "posix,cma,self", "get"},
    {"grpc+verbs", "grpc+verbs", nullptr, nullptr, true},
    {"grpc+ucx rc_verbs", "grpc+ucx", "rc_verbs,ud_verbs", nullptr, true}};

// "p50 / p90 / max" of `ms`, rounded to whole milliseconds.
std::string Quantiles(std::vector<double> ms);

// What a process holds: open fds, threads, and proportional set size (Pss,
// from smaps_rollup: a segment shared by two processes counts half in each).
struct Footprint {
  int fds = 0;
  int threads = 0;
  int64_t pss_kib = 0;
};

// Of process `pid`, or of this one when `pid` is 0; -1 in a field that
// could not be read.
Footprint MeasureFootprint(pid_t pid = 0);

}  // namespace rdv::bench
