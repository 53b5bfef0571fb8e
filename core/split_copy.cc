#include "core/split_copy.h"

#include <pthread.h>
#include <sched.h>

#include <cstring>

#include "core/sanitizers.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace rdv {
namespace {

#if defined(__x86_64__)
// An AMD CPU of family 1Ah or later whose `rep movsb` is fast (ERMS, FSRM).
bool RepMovsbBeatsMemcpy() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;  // AuthenticAMD
  if (!amd || eax < 7) return false;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const unsigned base_family = (eax >> 8) & 0xF;
  const unsigned family = base_family == 0xF ? base_family + ((eax >> 20) & 0xFF) : base_family;
  __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx);
  const bool erms = (ebx >> 9) & 1;
  const bool fsrm = (edx >> 4) & 1;
  return family >= 0x1A && erms && fsrm;
}

void RepMovsb(void* destination, const void* source, size_t length) {
  asm volatile("rep movsb" : "+D"(destination), "+S"(source), "+c"(length) : : "memory");
}
#else
bool RepMovsbBeatsMemcpy() { return false; }

void RepMovsb(void* destination, const void* source, size_t length) {
  std::memcpy(destination, source, length);
}
#endif

// The CPUs this thread may run on, but the one it runs on now; empty when
// it may run on one CPU only.
cpu_set_t OtherAllowedCpus() {
  cpu_set_t others;
  if (sched_getaffinity(0, sizeof others, &others) != 0) CPU_ZERO(&others);
  const int current = sched_getcpu();
  if (current >= 0 && current < CPU_SETSIZE) CPU_CLR(current, &others);
  return others;
}

}  // namespace

LargeCopyMethod MachineLargeCopyMethod() {
  static const LargeCopyMethod method = !kSanitizedBuild && RepMovsbBeatsMemcpy()
                                            ? LargeCopyMethod::kRepMovsb
                                            : LargeCopyMethod::kMemcpy;
  return method;
}

void CopyLarge(LargeCopyMethod method, void* destination, const void* source, size_t length) {
  if (length == 0) return;  // either pointer may then be null, which memcpy may not take
  if (method == LargeCopyMethod::kRepMovsb) {
    RepMovsb(destination, source, length);
  } else {
    std::memcpy(destination, source, length);
  }
}

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
  auto* to = static_cast<char*>(destination);
  const auto* from = static_cast<const char*>(source);
  // Cache-line aligned halves: neither thread writes the other's lines.
  const LargeCopyMethod method = MachineLargeCopyMethod();
  CopyByParts(length, 64, [method, to, from](size_t offset, size_t part) {
    CopyLarge(method, to + offset, from + offset, part);
    return true;
  });
}

bool SplitCopier::CopyByParts(size_t length, size_t alignment, const CopyPart& copy_part) {
  std::unique_lock use(use_mu_, std::defer_lock);
  const size_t first = (length / 2) & ~(alignment - 1);
  if (length < min_split_bytes_ || first == 0 || !use.try_lock()) return copy_part(0, length);
  const cpu_set_t others = OtherAllowedCpus();
  if (CPU_COUNT(&others) == 0) return copy_part(0, length);
  if (!helper_.joinable()) helper_ = std::thread([this] { Serve(); });
  // Woken from a busy CPU, the helper would be queued behind this thread
  // there (the scheduler wakes a thread near its waker), and its half
  // would start only when this one's ended. A placement that fails leaves
  // the helper where it may run already: the copy is right either way.
  pthread_setaffinity_np(helper_.native_handle(), sizeof others, &others);
  {
    std::lock_guard lock(mu_);
    part_ = {&copy_part, first, length - first};
    pending_ = true;
  }
  work_cv_.notify_one();
  const bool first_ok = copy_part(0, first);
  std::unique_lock lock(mu_);
  done_cv_.wait(lock, [this] { return !pending_; });
  return first_ok && part_ok_;
}

void SplitCopier::Serve() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [this] { return pending_ || stop_; });
    if (stop_) return;
    const Part part = part_;
    lock.unlock();
    const bool ok = (*part.copy)(part.offset, part.length);
    lock.lock();
    part_ok_ = ok;
    pending_ = false;
    done_cv_.notify_one();
  }
}

}  // namespace rdv
