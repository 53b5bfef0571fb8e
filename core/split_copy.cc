#include "core/split_copy.h"

#include <sched.h>

#include <cstring>

namespace rdv {
namespace {

bool MayRunOnSeveralCpus() {
  cpu_set_t allowed;
  return sched_getaffinity(0, sizeof allowed, &allowed) == 0 && CPU_COUNT(&allowed) > 1;
}

}  // namespace

SplitCopier::~SplitCopier() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_one();
  if (helper_.joinable()) helper_.join();
}

void SplitCopier::Copy(void* destination, const void* source, size_t length) {
  if (length == 0) return;  // either pointer may then be null
  std::unique_lock use(use_mu_, std::defer_lock);
  if (length < kMinSplitBytes || !use.try_lock() || !MayRunOnSeveralCpus()) {
    std::memcpy(destination, source, length);
    return;
  }
  if (!helper_.joinable()) helper_ = std::thread([this] { Serve(); });
  // Cache-line aligned halves: neither thread writes the other's lines.
  const size_t first = (length / 2) & ~size_t{63};
  {
    std::lock_guard lock(mu_);
    part_ = {static_cast<char*>(destination) + first, static_cast<const char*>(source) + first,
             length - first};
    pending_ = true;
  }
  work_cv_.notify_one();
  std::memcpy(destination, source, first);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [this] { return !pending_; });
}

void SplitCopier::Serve() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return pending_ || stop_; });
    if (stop_) return;
    const Part part = part_;
    lock.unlock();
    std::memcpy(part.destination, part.source, part.length);
    lock.lock();
    pending_ = false;
    done_cv_.notify_one();
  }
}

}  // namespace rdv
