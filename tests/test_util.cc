#include "tests/test_util.h"

#include <cstdlib>
#include <cstring>
#include <filesystem>

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

}  // namespace rdv::testing
