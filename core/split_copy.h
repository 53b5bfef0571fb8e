// Large copies made by two threads: one core's memcpy moves about 16 GB/s
// on the machines rdv is measured on, two about 35 (64 MiB between System V
// segments). The UCX plugin copies through a peer's mapped segment with it
// (it compiles this file in: it depends on the standard library only), and
// the torch backend stages a large send into such a segment.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>

namespace rdv {

class SplitCopier {
 public:
  // Copies of at least this many bytes are split: below it, waking the
  // helper costs about what it saves.
  static constexpr size_t kMinSplitBytes = size_t{4} << 20;

  SplitCopier() = default;
  // Stops and joins the helper thread. No Copy may be running.
  ~SplitCopier();
  SplitCopier(const SplitCopier&) = delete;
  SplitCopier& operator=(const SplitCopier&) = delete;

  // memcpy(destination, source, length); a large copy's second half is
  // made by a helper thread (started at the first), unless another copy
  // has it or the calling thread may run on one CPU only (the helper would
  // only take turns with it). Blocks until every byte is copied.
  // Thread-safe.
  void Copy(void* destination, const void* source, size_t length);

 private:
  struct Part {
    char* destination = nullptr;
    const char* source = nullptr;
    size_t length = 0;
  };
  void Serve();

  std::mutex use_mu_;  // held by the one copy that uses the helper
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  Part part_;            // mu_
  bool pending_ = false;  // mu_: part_ is the helper's to copy
  bool stop_ = false;     // mu_
  std::thread helper_;    // use_mu_, and the destructor
};

}  // namespace rdv
