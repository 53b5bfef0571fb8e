// Chunked staging copies on a real GPU; without one, every case says why
// it skipped, and the refusals that need no GPU still run.
#include "core/chunked_copy.h"

#include <cstring>

#include "core/notification.h"
#include "gtest/gtest.h"
#include "tests/test_util.h"

namespace rdv {
namespace {

constexpr size_t kChunk = size_t{1} << 20;

Tensor Pinned(int64_t bytes) {
  absl::StatusOr<std::shared_ptr<Allocator>> pinned = cuda::PinnedHostAllocator();
  EXPECT_TRUE(pinned.ok()) << pinned.status();
  absl::StatusOr<Tensor> tensor =
      Tensor::Allocate(*pinned, DType::kUInt8, *TensorShape::Create({bytes}));
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return *tensor;
}

void Fill(Tensor& tensor, uint8_t seed) {
  for (size_t i = 0; i < tensor.TotalBytes(); ++i) {
    tensor.flat<uint8_t>()[i] = static_cast<uint8_t>(i * 31 + seed);
  }
}

bool Holds(const Tensor& tensor, uint8_t seed) {
  for (size_t i = 0; i < tensor.TotalBytes(); ++i) {
    if (tensor.flat<uint8_t>()[i] != static_cast<uint8_t>(i * 31 + seed)) return false;
  }
  return true;
}

TEST(ChunkedCopyTest, RefusesPageableOrHostSides) {
  const Tensor pageable =
      *Tensor::Allocate(HostAllocator(), DType::kUInt8, *TensorShape::Create({16}));
  EXPECT_EQ(ChunkedUpload::Create(pageable, MemoryLocation::Cuda(0), kChunk).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ChunkedDownload::Start(pageable, kChunk).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// The host side fills up in uneven steps, as the wire delivers it; the
// device ends up with every byte, and a download in chunks brings it back.
TEST(ChunkedCopyTest, UploadAsItFillsThenDownloadInChunks) {
  RDV_SKIP_WITHOUT_GPUS(1);
  const int64_t bytes = (int64_t{5} << 20) + 12345;
  Tensor host = Pinned(bytes);
  Fill(host, 9);
  absl::StatusOr<std::unique_ptr<ChunkedUpload>> upload =
      ChunkedUpload::Create(host, MemoryLocation::Cuda(0), kChunk);
  ASSERT_TRUE(upload.ok()) << upload.status();
  for (size_t filled = 0; filled < static_cast<size_t>(bytes); filled += 777777) {
    (*upload)->Advance(filled);
  }
  Notification uploaded;
  absl::StatusOr<Tensor> device;
  (*upload)->Finish([&](absl::StatusOr<Tensor> copied) {
    device = std::move(copied);
    uploaded.Notify();
  });
  ASSERT_TRUE(uploaded.WaitForNotificationWithTimeout(testing::kWaitLimit));
  ASSERT_TRUE(device.ok()) << device.status();
  EXPECT_EQ(device->location(), MemoryLocation::Cuda(0));

  absl::StatusOr<std::unique_ptr<ChunkedDownload>> download =
      ChunkedDownload::Start(*device, kChunk);
  ASSERT_TRUE(download.ok()) << download.status();
  Notification landed;
  absl::StatusOr<bool> ready =
      (*download)->WhenReady(static_cast<size_t>(bytes), [&] { landed.Notify(); });
  ASSERT_TRUE(ready.ok()) << ready.status();
  if (!*ready) {
    ASSERT_TRUE(landed.WaitForNotificationWithTimeout(testing::kWaitLimit));
  }
  EXPECT_TRUE(Holds((*download)->host(), 9));
}

}  // namespace
}  // namespace rdv
