// Helpers shared by rdv's tests: keys, small host tensors, bounded waits.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "core/cuda.h"
#include "core/notification.h"
#include "core/rendezvous.h"

namespace rdv::testing {

// Every wait in a test is bounded by this, so that a bug fails instead of
// hanging CI.
inline constexpr absl::Duration kWaitLimit = absl::Seconds(30);

inline constexpr char kCpu0[] = "/job:worker/replica:0/task:0/device:CPU:0";
inline constexpr char kCpu1[] = "/job:worker/replica:0/task:0/device:CPU:1";
inline constexpr char kGpu0[] = "/job:worker/replica:0/task:0/device:GPU:0";
inline constexpr char kGpu1[] = "/job:worker/replica:0/task:0/device:GPU:1";

// Sets (or, given nullptr, unsets) one environment variable for a scope,
// then puts the old value back.
class ScopedVariable {
 public:
  ScopedVariable(const char* name, const char* value);
  ~ScopedVariable();
  ScopedVariable(const ScopedVariable&) = delete;
  ScopedVariable& operator=(const ScopedVariable&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

// A parsed key from kCpu0 to `dst` named `name`; fails the test on error.
ParsedKey Key(const std::string& name, const char* dst = kCpu1, const char* src = kCpu0);

// A host float tensor holding `values`.
Tensor FloatTensor(const std::vector<float>& values);
std::vector<float> FloatValues(const Tensor& t);

// The outcome of one RecvAsync, filled by the callback from Capture().
struct RecvResult {
  Notification done;
  int calls = 0;
  absl::Status status;
  Tensor value;
  bool is_dead = false;

  RecvDoneCallback Capture();
  // Waits up to kWaitLimit; false on timeout.
  bool Wait() { return done.WaitForNotificationWithTimeout(kWaitLimit); }
};

// Looks at `condition` every 200 us until it holds (true) or `limit`
// passes (false): for states a test can only observe, not wait on.
bool PollUntil(const std::function<bool()>& condition, absl::Duration limit = kWaitLimit);

// Whether this machine has an RDMA device (rdma-core lists them in sysfs).
bool HaveRdmaDevice();

// One mapping of this process, as /proc/self/smaps describes it.
struct Mapping {
  uintptr_t begin = 0;
  uintptr_t end = 0;
  uint64_t inode = 0;      // a System V segment's is its id
  size_t rss_bytes = 0;    // its pages mapped now
  std::string vm_flags;    // the VmFlags line
};
std::vector<Mapping> Mappings();
// The mapping that holds `address`; nullopt when none does.
std::optional<Mapping> MappingAt(const void* address);

}  // namespace rdv::testing

// Skips a test that needs `n` CUDA devices, saying why there are fewer.
#define RDV_SKIP_WITHOUT_GPUS(n)                                                           \
  if (::rdv::cuda::DeviceCount() < (n))                                                    \
  GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << ::rdv::cuda::DeviceCount() \
               << ": " << ::rdv::cuda::UnavailableReason()
