#include "core/dtype.h"

#include "gtest/gtest.h"

namespace rdv {
namespace {

TEST(DTypeTest, SizesAndNamesFollowTensorFlow) {
  EXPECT_EQ(DTypeSize(DType::kFloat), 4u);
  EXPECT_EQ(DTypeSize(DType::kHalf), 2u);
  EXPECT_EQ(DTypeSize(DType::kBFloat16), 2u);
  EXPECT_EQ(DTypeSize(DType::kComplex128), 16u);
  EXPECT_EQ(DTypeSize(DType::kBool), 1u);
  EXPECT_EQ(DTypeSize(DType::kInvalid), 0u);
  EXPECT_EQ(DTypeName(DType::kInt32), "int32");
  EXPECT_EQ(DTypeName(DType::kBFloat16), "bfloat16");
  EXPECT_EQ(static_cast<int>(DType::kHalf), 19);
  EXPECT_EQ(static_cast<int>(DType::kUInt64), 23);
}

TEST(DTypeTest, NamesRoundTrip) {
  for (const DType d : {DType::kFloat, DType::kDouble, DType::kInt8, DType::kInt16, DType::kInt32,
                        DType::kInt64, DType::kUInt8, DType::kUInt16, DType::kUInt32,
                        DType::kUInt64, DType::kBool, DType::kHalf, DType::kBFloat16,
                        DType::kComplex64, DType::kComplex128, DType::kString}) {
    auto parsed = DTypeFromName(DTypeName(d));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, d);
    EXPECT_EQ(*DTypeFromEnumValue(static_cast<int>(d)), d);
  }
  EXPECT_EQ(*DTypeFromName("float16"), DType::kHalf);
}

TEST(DTypeTest, UnknownInputIsInvalidArgument) {
  EXPECT_EQ(DTypeFromName("float33").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DTypeFromEnumValue(12).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DTypeFromEnumValue(-1).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(DTypeTest, OnlyStringIsNotMemcpyable) {
  EXPECT_TRUE(DTypeIsMemcpyable(DType::kFloat));
  EXPECT_TRUE(DTypeIsMemcpyable(DType::kBool));
  EXPECT_FALSE(DTypeIsMemcpyable(DType::kString));
  EXPECT_FALSE(DTypeIsMemcpyable(DType::kInvalid));
}

}  // namespace
}  // namespace rdv
