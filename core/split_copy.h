// Large copies made by two threads: one core's memcpy moves about 16 GB/s
// on the machines rdv is measured on, two about 35 (64 MiB between System V
// segments). The UCX plugin copies through a peer's mapped segment with it
// (it compiles this file in: it depends on the standard library only), and
// the torch backend stages a large send into such a segment.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>

namespace rdv {

// How one thread copies a large range.
enum class LargeCopyMethod {
  kMemcpy,    // the C library's memcpy
  kRepMovsb,  // the `rep movsb` instruction (x86-64); memcpy elsewhere
};

// The method for this machine: `rep movsb` on AMD CPUs of family 1Ah (Zen 5)
// and later with fast short `rep movsb` (FSRM), where it copied 1 MiB about
// 15% faster and 16 MiB 30% faster than glibc 2.36's memcpy, which leaves
// the instruction above the L2 cache size on AMD CPUs (as Zen 3 wanted).
// memcpy elsewhere, and under a sanitizer, which sees no copy made by an
// instruction. Chosen once per process.
LargeCopyMethod MachineLargeCopyMethod();

// memcpy(destination, source, length) by `method`; with `length` 0 either
// pointer may be null.
void CopyLarge(LargeCopyMethod method, void* destination, const void* source, size_t length);

class SplitCopier {
 public:
  // Copies of at least this many bytes are split: below it, waking the
  // helper costs about what it saves.
  static constexpr size_t kMinSplitBytes = size_t{4} << 20;

  // Copies a range of a copy: the `length` bytes from `offset` on; false
  // when it failed (errno says why).
  using CopyPart = std::function<bool(size_t offset, size_t length)>;

  // Splits copies of at least `min_split_bytes`.
  explicit SplitCopier(size_t min_split_bytes = kMinSplitBytes)
      : min_split_bytes_(min_split_bytes) {}
  // Stops and joins the helper thread. No Copy may be running.
  ~SplitCopier();
  SplitCopier(const SplitCopier&) = delete;
  SplitCopier& operator=(const SplitCopier&) = delete;

  // memcpy(destination, source, length) by MachineLargeCopyMethod(),
  // split as CopyByParts splits.
  void Copy(void* destination, const void* source, size_t length);

  // Calls `copy_part` for the whole `length` bytes, or, from
  // min_split_bytes up, for its first half on this thread and its second on
  // a helper thread (started at the first), the halves meeting at a multiple
  // of `alignment` (a power of two). The helper may run on the CPUs the
  // caller may, but the one the caller is on. Unsplit when another copy has
  // the helper or the calling thread may run on one CPU only (the helper
  // would only take turns with it). Blocks until both halves ended; true
  // when both succeeded. Thread-safe.
  bool CopyByParts(size_t length, size_t alignment, const CopyPart& copy_part);

 private:
  struct Part {
    const CopyPart* copy = nullptr;
    size_t offset = 0;
    size_t length = 0;
  };
  void Serve();

  const size_t min_split_bytes_;
  std::mutex use_mu_;  // held by the one copy that uses the helper
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  Part part_;             // mu_
  bool pending_ = false;  // mu_: part_ is the helper's to copy
  bool part_ok_ = true;   // mu_: how the helper's last part ended
  bool stop_ = false;     // mu_
  std::thread helper_;    // use_mu_, and the destructor
};

}  // namespace rdv
