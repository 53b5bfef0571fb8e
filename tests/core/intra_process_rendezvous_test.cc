#include "core/intra_process_rendezvous.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/cuda.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv {
namespace {

using testing::FloatTensor;
using testing::FloatValues;
using testing::kCpu0;
using testing::kCpu1;
using testing::kGpu0;
using testing::kGpu1;
using testing::Key;
using testing::RecvResult;

Tensor BytePattern(std::shared_ptr<Allocator> allocator, int64_t bytes) {
  auto t = Tensor::Allocate(std::move(allocator), DType::kUInt8, *TensorShape::Create({bytes}));
  EXPECT_TRUE(t.ok()) << t.status();
  if (t->location().is_host()) {
    for (int64_t i = 0; i < bytes; ++i) t->flat<uint8_t>()[i] = static_cast<uint8_t>(i * 7 + 3);
  }
  return *t;
}

RecvResult& SendThenRecv(IntraProcessRendezvous& r, const ParsedKey& key, const Tensor& value,
                         RecvResult& result, RendezvousArgs recv_args = {}) {
  EXPECT_TRUE(r.Send(key, {}, value, false).ok());
  r.RecvAsync(key, recv_args, result.Capture());
  EXPECT_TRUE(result.Wait());
  return result;
}

TEST(IntraProcessRendezvousTest, HostToHostSharesTheBufferAtAnySize) {
  IntraProcessRendezvous r;
  for (int64_t bytes : {int64_t{0}, int64_t{1}, int64_t{1} << 10, int64_t{256} << 20}) {
    const Tensor sent = BytePattern(HostAllocator(), bytes);
    RecvResult result;
    SendThenRecv(r, Key(absl::StrCat("h2h", bytes)), sent, result);
    ASSERT_TRUE(result.status.ok()) << result.status;
    EXPECT_EQ(result.value.data(), sent.data()) << bytes << " bytes were copied";
    EXPECT_EQ(result.value.buffer(), sent.buffer());
  }
}

TEST(IntraProcessRendezvousTest, HostRecvOnGpuDeviceSharesTheBuffer) {
  IntraProcessRendezvous r;
  const Tensor sent = FloatTensor({1, 2});
  RendezvousArgs on_host;
  on_host.alloc_attrs.on_host = true;
  RecvResult result;
  SendThenRecv(r, Key("hostrecv", kGpu0), sent, result, on_host);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.value.data(), sent.data());
}

TEST(IntraProcessRendezvousTest, DestinationFollowsKeyAndArgs) {
  EXPECT_EQ(RecvDestination(Key("a", kGpu1), {}), MemoryLocation::Cuda(1));
  EXPECT_EQ(RecvDestination(Key("a", kCpu1), {}), MemoryLocation::Host());
  RendezvousArgs on_host;
  on_host.alloc_attrs.on_host = true;
  EXPECT_EQ(RecvDestination(Key("a", kGpu1), on_host), MemoryLocation::Host());
}

TEST(IntraProcessRendezvousTest, StringTensorToGpuIsInvalidArgument) {
  IntraProcessRendezvous r;
  auto strings = Tensor::Allocate(HostAllocator(), DType::kString, *TensorShape::Create({2}));
  ASSERT_TRUE(strings.ok());
  RecvResult result;
  SendThenRecv(r, Key("str", kGpu0), *strings, result);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument) << result.status;
  EXPECT_NE(result.status.message().find("Non-DMA-safe string"), absl::string_view::npos);
}

TEST(IntraProcessRendezvousTest, GpuDestinationWithoutGpuFailsTheRecvClearly) {
  if (cuda::DeviceCount() > 0) GTEST_SKIP() << "a GPU is present; covered by the GPU tests";
  IntraProcessRendezvous r;
  RecvResult result;
  SendThenRecv(r, Key("nogpu", kGpu0), FloatTensor({1}), result);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kFailedPrecondition) << result.status;
  EXPECT_FALSE(result.status.message().empty());
  EXPECT_EQ(result.calls, 1);
  EXPECT_EQ(r.CountPending().values, 0u);
}

// Host -> GPU 0 -> host, checking every byte, through pageable and pinned sources.
TEST(IntraProcessRendezvousTest, HostToGpuToHostRoundTrip) {
  RDV_SKIP_WITHOUT_GPUS(1);
  IntraProcessRendezvous r;
  auto pinned = cuda::PinnedHostAllocator();
  ASSERT_TRUE(pinned.ok()) << pinned.status();
  for (const auto& allocator : {HostAllocator(), *pinned}) {
    for (int64_t bytes : {int64_t{1}, int64_t{4} << 10, int64_t{64} << 20}) {
      const Tensor sent = BytePattern(allocator, bytes);
      if (allocator == *pinned) {
        std::memcpy(sent.data(), BytePattern(HostAllocator(), bytes).data(), bytes);
      }
      RecvResult on_gpu;
      SendThenRecv(r, Key("up", kGpu0, kCpu0), sent, on_gpu);
      ASSERT_TRUE(on_gpu.status.ok()) << on_gpu.status;
      EXPECT_EQ(on_gpu.value.location(), MemoryLocation::Cuda(0));
      RecvResult back;
      SendThenRecv(r, Key("down", kCpu0, kGpu0), on_gpu.value, back);
      ASSERT_TRUE(back.status.ok()) << back.status;
      EXPECT_EQ(back.value.location(), MemoryLocation::PinnedHost());
      EXPECT_EQ(std::memcmp(back.value.data(), sent.data(), bytes), 0) << bytes;
    }
  }
}

TEST(IntraProcessRendezvousTest, SameGpuSharesTheBuffer) {
  RDV_SKIP_WITHOUT_GPUS(1);
  IntraProcessRendezvous r;
  auto device = cuda::DeviceAllocator(0);
  ASSERT_TRUE(device.ok()) << device.status();
  const Tensor sent = BytePattern(*device, 1024);
  RecvResult result;
  SendThenRecv(r, Key("same", kGpu0, kGpu0), sent, result);
  ASSERT_TRUE(result.status.ok()) << result.status;
  EXPECT_EQ(result.value.data(), sent.data());
}

TEST(IntraProcessRendezvousTest, GpuToGpuCopies) {
  RDV_SKIP_WITHOUT_GPUS(2);
  IntraProcessRendezvous r;
  const Tensor host = BytePattern(HostAllocator(), 1 << 20);
  RecvResult on0, on1, back;
  SendThenRecv(r, Key("g0", kGpu0), host, on0);
  ASSERT_TRUE(on0.status.ok()) << on0.status;
  SendThenRecv(r, Key("g1", kGpu1, kGpu0), on0.value, on1);
  ASSERT_TRUE(on1.status.ok()) << on1.status;
  EXPECT_EQ(on1.value.location(), MemoryLocation::Cuda(1));
  SendThenRecv(r, Key("h", kCpu0, kGpu1), on1.value, back);
  ASSERT_TRUE(back.status.ok()) << back.status;
  EXPECT_EQ(std::memcmp(back.value.data(), host.data(), host.TotalBytes()), 0);
}

TEST(IntraProcessRendezvousTest, BadGpuOrdinalIsAnError) {
  RDV_SKIP_WITHOUT_GPUS(1);
  IntraProcessRendezvous r;
  RecvResult result;
  SendThenRecv(r, Key("far", "/job:worker/replica:0/task:0/device:GPU:99"), FloatTensor({1}),
               result);
  EXPECT_EQ(result.status.code(), absl::StatusCode::kInvalidArgument) << result.status;
}

}  // namespace
}  // namespace rdv
