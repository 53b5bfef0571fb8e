#include "tests/test_util.h"

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace rdv::testing {

ScopedVariable::ScopedVariable(const char* name, const char* value) : name_(name) {
  if (const char* old = std::getenv(name)) saved_ = old;
  value != nullptr ? setenv(name, value, 1) : unsetenv(name);
}

ScopedVariable::~ScopedVariable() {
  saved_ ? setenv(name_, saved_->c_str(), 1) : unsetenv(name_);
}

ParsedKey Key(const std::string& name, const char* dst, const char* src) {
  absl::StatusOr<ParsedKey> key =
      ParsedKey::Parse(CreateRendezvousKey(src, 1, dst, name, FrameAndIter{0, 0}));
  EXPECT_TRUE(key.ok()) << key.status();
  return key.ok() ? *std::move(key) : ParsedKey();
}

Tensor FloatTensor(const std::vector<float>& values) {
  auto shape = TensorShape::Create({static_cast<int64_t>(values.size())});
  auto tensor = Tensor::Allocate(HostAllocator(), DType::kFloat, *shape);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  if (!values.empty()) std::memcpy(tensor->data(), values.data(), values.size() * sizeof(float));
  return *tensor;
}

std::vector<float> FloatValues(const Tensor& t) {
  const float* data = t.flat<float>();
  return std::vector<float>(data, data + t.num_elements());
}

RecvDoneCallback RecvResult::Capture() {
  return [this](const absl::Status& s, const RendezvousArgs&, const RendezvousArgs&,
                const Tensor& v, bool dead) {
    ++calls;
    status = s;
    value = v;
    is_dead = dead;
    if (calls == 1) done.Notify();
  };
}

bool PollUntil(const std::function<bool()>& condition, absl::Duration limit) {
  const absl::Time deadline = absl::Now() + limit;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Microseconds(200));
  }
  return true;
}

bool HaveRdmaDevice() {
  std::error_code error;
  return !std::filesystem::is_empty("/sys/class/infiniband", error) && !error;
}

std::vector<Mapping> Mappings() {
  std::vector<Mapping> mappings;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  while (std::getline(smaps, line)) {
    Mapping header;
    size_t rss_kib = 0;
    if (std::sscanf(line.c_str(), "%" SCNxPTR "-%" SCNxPTR " %*s %*s %*s %" SCNu64, &header.begin,
                    &header.end, &header.inode) == 3) {
      mappings.push_back(header);
    } else if (mappings.empty()) {
      continue;
    } else if (std::sscanf(line.c_str(), "Rss: %zu kB", &rss_kib) == 1) {
      mappings.back().rss_bytes = rss_kib << 10;
    } else if (absl::StartsWith(line, "VmFlags:")) {
      mappings.back().vm_flags = line;
    }
  }
  return mappings;
}

std::optional<Mapping> MappingAt(const void* address) {
  const auto target = reinterpret_cast<uintptr_t>(address);
  for (Mapping& mapping : Mappings()) {
    if (mapping.begin <= target && target < mapping.end) return std::move(mapping);
  }
  return std::nullopt;
}

}  // namespace rdv::testing
