// GPU destinations on the fast path (control/fast_path.h), between this
// process and a producer worker process: a known key bound for a GPU comes
// into host memory by the fast path and then by DMA, and without a GPU
// such a Recv fails saying why. Cases of the conformance suite
// (remote_fast_path.h), run for the protocol settings with the fast path
// on.
#include <cstdint>
#include <deque>
#include <string>

#include "absl/cleanup/cleanup.h"
#include "control/fast_path.h"
#include "core/cuda.h"
#include "core/device_copy.h"
#include "tests/control/remote_fast_path.h"

namespace rdv::control::remote_test {
namespace {

// A known key bound for a GPU comes by the fast path into host memory and
// then by DMA: when the Recv ends (blocking or async) the tensor is on the
// GPU with every byte.
TEST_P(RemoteFastPathGpuTest, FastPathValueForAGpuIsOnItWhenTheRecvEnds) {
  const ParsedKey key = Key("to_gpu", 0, kProducerCpu, kConsumerGpu);
  constexpr int64_t kBytes = int64_t{1} << 20;
  constexpr uint32_t kValues = 6;
  for (uint32_t seed = 1; seed <= kValues; ++seed) {
    ASSERT_TRUE(Produce(71, {Item(key, DType::kUInt8, {kBytes}, seed)}).ok());
  }
  const int64_t fast_before = consumer_->fast_path()->recvs_started();
  std::deque<RecvResult> started;
  // An async Recv that did not end must, before its result goes.
  absl::Cleanup end_recvs = [&] {
    consumer_->rendezvous_mgr().Find(71)->StartAbort(absl::AbortedError("the test ended"));
    for (RecvResult& result : started) EXPECT_TRUE(result.Wait());
  };
  for (uint32_t seed = 1; seed <= kValues; ++seed) {
    Tensor value;
    bool is_dead = true;
    if (seed % 2 == 0) {
      RecvResult& result = started.emplace_back();
      consumer_->rendezvous_mgr().Find(71)->RecvAsync(key, {}, result.Capture());
      ASSERT_TRUE(result.Wait()) << "async Recv " << seed << " did not end";
      ASSERT_TRUE(result.status.ok()) << seed << ": " << result.status;
      value = result.value;
      is_dead = result.is_dead;
    } else {
      const absl::Status status = Recv(71, key, &value, &is_dead);
      ASSERT_TRUE(status.ok()) << seed << ": " << status;
    }
    EXPECT_FALSE(is_dead);
    ASSERT_TRUE(value.location() == MemoryLocation::Cuda(0))
        << seed << ": " << value.location().ToString();
    absl::StatusOr<Tensor> on_host = CopyTensor(value, MemoryLocation::Host());
    ASSERT_TRUE(on_host.ok()) << on_host.status();
    EXPECT_TRUE(VerifyPattern(*on_host, seed).ok()) << "seed " << seed;
  }
  // The first teaches the key by RecvTensor; the others come fast.
  EXPECT_GE(consumer_->fast_path()->recvs_started() - fast_before, kValues - 1);
}

// Without a GPU, a known key bound for one fails each Recv clearly, by the
// fast path too, and the consumer goes on serving others.
TEST_P(RemoteFastPathTest, FastPathValueForAMissingGpuFailsTheRecvClearly) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  const ParsedKey key = Key("to_missing_gpu", 0, kProducerCpu, kConsumerGpu);
  for (uint32_t seed = 1; seed <= 2; ++seed) {
    ASSERT_TRUE(Produce(72, {Item(key, DType::kUInt8, {4096}, seed)}).ok());
  }
  const int64_t fast_before = consumer_->fast_path()->recvs_started();
  for (int recv = 1; recv <= 2; ++recv) {
    const absl::Status status = RecvStatus(72, key);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << recv << ": " << status;
    EXPECT_NE(status.message().find("CUDA"), std::string::npos) << "it should say why: " << status;
  }
  EXPECT_EQ(consumer_->fast_path()->recvs_started() - fast_before, 1)
      << "the second Recv should have gone by the fast path";
  const ParsedKey host_key = Key("after_missing_gpu");
  ASSERT_TRUE(Produce(72, {Item(host_key, DType::kUInt8, {4096}, 3)}).ok());
  ExpectPattern(72, host_key, 3, 4096);
}

}  // namespace
}  // namespace rdv::control::remote_test
