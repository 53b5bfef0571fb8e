// The pattern rdv-bench and the conformance suite check received bytes by.
#include "control/tensor_pattern.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rdv::control {
namespace {

constexpr int64_t kBytes = 256 * 1000 + 17;  // 1,001 blocks, the last one short

Tensor PatternOf(uint32_t seed) {
  absl::StatusOr<Tensor> tensor =
      MakePatternTensor(DType::kUInt8, *TensorShape::Create({kBytes}), seed);
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  return *tensor;
}

TEST(TensorPatternTest, EveryByteIsChecked) {
  Tensor tensor = PatternOf(7);
  EXPECT_TRUE(VerifyPattern(tensor, 7).ok());
  EXPECT_EQ(VerifyPattern(tensor, 8).code(), absl::StatusCode::kDataLoss) << "another seed";
  tensor.flat<uint8_t>()[kBytes / 2 + 3] ^= 1;
  const absl::Status status = VerifyPattern(tensor, 7);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(status.message().find(absl::StrCat("byte ", kBytes / 2 + 3, " of ")),
            absl::string_view::npos)
      << status;
}

TEST(TensorPatternTest, ASampleChecksTheFirstAndLastBlocksAndSomeBetween) {
  Tensor tensor = PatternOf(3);
  EXPECT_TRUE(VerifyPatternSample(tensor, 3, 64).ok());
  EXPECT_EQ(VerifyPatternSample(tensor, 4, 64).code(), absl::StatusCode::kDataLoss);
  // Block 500 lies between the sampled blocks 492 and 507 of 1,001.
  tensor.flat<uint8_t>()[500 * 256] ^= 1;
  EXPECT_TRUE(VerifyPatternSample(tensor, 3, 64).ok()) << "a sample, not every byte";
  EXPECT_EQ(VerifyPattern(tensor, 3).code(), absl::StatusCode::kDataLoss);
  tensor.flat<uint8_t>()[500 * 256] ^= 1;
  tensor.flat<uint8_t>()[kBytes - 1] ^= 1;
  EXPECT_EQ(VerifyPatternSample(tensor, 3, 64).code(), absl::StatusCode::kDataLoss) << "last";
  tensor.flat<uint8_t>()[kBytes - 1] ^= 1;
  tensor.flat<uint8_t>()[0] ^= 1;
  EXPECT_EQ(VerifyPatternSample(tensor, 3, 1).code(), absl::StatusCode::kDataLoss) << "first";
}

}  // namespace
}  // namespace rdv::control
