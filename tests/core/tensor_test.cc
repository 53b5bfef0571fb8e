#include "core/tensor.h"

#include <cstdint>
#include <limits>
#include <string>

#include "gtest/gtest.h"

namespace rdv {
namespace {

TEST(TensorShapeTest, CountsElements) {
  auto shape = TensorShape::Create({2, 3, 4});
  ASSERT_TRUE(shape.ok());
  EXPECT_EQ(shape->num_elements(), 24);
  EXPECT_EQ(shape->rank(), 3);
  EXPECT_EQ(shape->DebugString(), "[2,3,4]");
  EXPECT_EQ(TensorShape().num_elements(), 1);
  EXPECT_EQ(TensorShape().DebugString(), "[]");
  EXPECT_EQ(TensorShape::Create({5, 0})->num_elements(), 0);
}

TEST(TensorShapeTest, RejectsBadDimensions) {
  EXPECT_EQ(TensorShape::Create({2, -1}).status().code(), absl::StatusCode::kInvalidArgument);
  const int64_t big = std::numeric_limits<int64_t>::max() / 2;
  auto overflow = TensorShape::Create({big, 3});
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(overflow.status().message().find("int64"), absl::string_view::npos);
  std::vector<int64_t> too_many(TensorShape::kMaxRank + 1, 1);
  EXPECT_FALSE(TensorShape::Create(too_many).ok());
}

TEST(TensorTest, CopiesShareTheBuffer) {
  auto t = Tensor::Allocate(HostAllocator(), DType::kInt32, *TensorShape::Create({4}));
  ASSERT_TRUE(t.ok()) << t.status();
  Tensor copy = *t;
  EXPECT_EQ(copy.data(), t->data());
  EXPECT_EQ(copy.buffer().use_count(), 2);
  EXPECT_EQ(copy.TotalBytes(), 16u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(copy.data()) % Allocator::kAlignment, 0u);
  EXPECT_EQ(copy.DebugString(), "Tensor<int32 [4] host>");
}

TEST(TensorTest, EmptyTensorHasNoData) {
  auto t = Tensor::Allocate(HostAllocator(), DType::kFloat, *TensorShape::Create({0, 7}));
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t->IsInitialized());
  EXPECT_EQ(t->TotalBytes(), 0u);
  EXPECT_EQ(t->data(), nullptr);
  EXPECT_FALSE(Tensor().IsInitialized());
}

TEST(TensorTest, StringElementsAreConstructedAndFreed) {
  auto t = Tensor::Allocate(HostAllocator(), DType::kString, *TensorShape::Create({3}));
  ASSERT_TRUE(t.ok());
  t->flat<std::string>()[2] = std::string(1000, 'x');  // heap-allocated: ASan sees a leak if not destroyed
  EXPECT_EQ(t->flat<std::string>()[0], "");
  EXPECT_EQ(t->flat<std::string>()[2].size(), 1000u);
}

TEST(TensorTest, FromBufferChecksSize) {
  auto buffer = Buffer::Allocate(HostAllocator(), 8);
  ASSERT_TRUE(buffer.ok());
  EXPECT_TRUE(Tensor::FromBuffer(DType::kFloat, *TensorShape::Create({2}), *buffer).ok());
  auto too_small = Tensor::FromBuffer(DType::kFloat, *TensorShape::Create({3}), *buffer);
  EXPECT_EQ(too_small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(Tensor::FromBuffer(DType::kFloat, TensorShape(), nullptr).ok());
  EXPECT_FALSE(Tensor::FromBuffer(DType::kInvalid, TensorShape(), *buffer).ok());
}

TEST(TensorTest, WrappedBufferReleasesOnce) {
  int releases = 0;
  char storage[16];
  {
    auto buffer = Buffer::Wrap(storage, sizeof(storage), MemoryLocation::Host(),
                               [&releases] { ++releases; });
    auto t = Tensor::FromBuffer(DType::kUInt8, *TensorShape::Create({16}), buffer);
    ASSERT_TRUE(t.ok());
    Tensor copy = *t;
    EXPECT_EQ(copy.data(), storage);
  }
  EXPECT_EQ(releases, 1);
}

TEST(TensorTest, ImpossibleSizeIsAnError) {
  auto shape = TensorShape::Create({std::numeric_limits<int64_t>::max()});
  ASSERT_TRUE(shape.ok());
  auto t = Tensor::Allocate(HostAllocator(), DType::kDouble, *shape);
  EXPECT_FALSE(t.ok());
}

}  // namespace
}  // namespace rdv
