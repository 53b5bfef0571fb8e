// What a consumer's own copy of a producer's private memory could move
// between two processes of one host, beside the memcpy it is measured
// against in the same run:
// - BM_ProcessVmReadv/<bytes>/<threads>: process_vm_readv (cma) of a
//   child process's buffer, by one thread or split in halves between the
//   caller and a helper thread that waits for work (SplitCopier, as the
//   UCX plugin's copier; its wake-up is timed too);
// - BM_Memcpy/<bytes>/<threads>: the same bytes copied within the process.
// UCX reads a tagged rendezvous over shared memory with one thread's cma
// (docs/torch.md, "The ceiling at 1 MiB and above over shared memory").
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/split_copy.h"

namespace {

// A child process, which holds a copy of everything this one has (the
// pages shared until either writes), until it is destroyed.
class Holder {
 public:
  Holder() {
    if (pipe(release_) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      char ignored;
      (void)!read(release_[0], &ignored, 1);
      _exit(0);
    }
  }
  ~Holder() {
    if (pid_ > 0) {
      (void)!write(release_[1], "x", 1);
      waitpid(pid_, nullptr, 0);
    }
    close(release_[0]);
    close(release_[1]);
  }
  pid_t pid() const { return pid_; }

 private:
  int release_[2] = {-1, -1};
  pid_t pid_ = -1;
};

bool ReadFrom(pid_t pid, char* destination, const char* source, size_t length) {
  iovec local{destination, length};
  iovec remote{const_cast<char*>(source), length};
  return process_vm_readv(pid, &local, 1, &remote, 1, 0) == static_cast<ssize_t>(length);
}

// Copies `length` bytes with `copy`, in halves on two threads when asked.
template <typename Copy>
void RunCopies(benchmark::State& state, Copy copy) {
  const size_t length = static_cast<size_t>(state.range(0));
  const bool split = state.range(1) == 2;
  std::vector<char> source(length, 7), destination(length, 1);
  Holder holder;
  if (holder.pid() <= 0) return state.SkipWithError("fork failed");
  // Our pages are shared with the child's until written: take the
  // destination's copies on write before the clock starts.
  std::memset(destination.data(), 2, length);
  // Split from any size (the first half on this thread, the second on
  // SplitCopier's helper, woken per copy as the transport's is), or never.
  rdv::SplitCopier copier(split ? 0 : length + 1);
  const rdv::SplitCopier::CopyPart copy_part = [&](size_t offset, size_t part) {
    return copy(holder.pid(), &destination[offset], &source[offset], part);
  };
  for (auto _ : state) {
    if (!copier.CopyByParts(length, 4096, copy_part)) {
      const std::string why = std::string("copy failed: ") + std::strerror(errno);
      return state.SkipWithError(why.c_str());
    }
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * length));
}

void BM_ProcessVmReadv(benchmark::State& state) { RunCopies(state, ReadFrom); }

void BM_Memcpy(benchmark::State& state) {
  RunCopies(state, [](pid_t, char* destination, const char* source, size_t length) {
    std::memcpy(destination, source, length);
    return true;
  });
}

void Sizes(benchmark::internal::Benchmark* benchmark) {
  for (int64_t bytes : {int64_t{1} << 20, int64_t{4} << 20, int64_t{16} << 20,
                        int64_t{64} << 20}) {
    for (int64_t threads : {1, 2}) benchmark->Args({bytes, threads});
  }
  benchmark->ArgNames({"bytes", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

BENCHMARK(BM_ProcessVmReadv)->Apply(Sizes);
BENCHMARK(BM_Memcpy)->Apply(Sizes);

}  // namespace

BENCHMARK_MAIN();
