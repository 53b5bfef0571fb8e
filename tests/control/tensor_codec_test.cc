#include "control/tensor_codec.h"

#include "control/tensor_pattern.h"
#include "gtest/gtest.h"

namespace rdv::control {
namespace {

// Encodes `tensor` in chunks of `chunk` bytes and decodes them again.
absl::StatusOr<Tensor> RoundTrip(const Tensor& tensor, size_t chunk) {
  auto payload = TensorPayload::Of(tensor);
  if (!payload.ok()) return payload.status();
  const TensorMeta meta = MakeTensorMeta(tensor, false, payload->size(), 0);
  TensorDecoder decoder;
  size_t offset = 0;
  do {
    const size_t length = std::min(chunk, payload->size() - offset);
    grpc::ByteBuffer buffer = EncodeChunk(offset == 0 ? &meta : nullptr, *payload, offset, length);
    RDV_RETURN_IF_ERROR(decoder.Consume(&buffer));
    offset += length;
  } while (offset < payload->size());
  return decoder.Finish();
}

TEST(TensorCodecTest, RoundTripsAcrossChunkSizes) {
  for (size_t chunk : {size_t{1}, size_t{1000}, size_t{4096}, size_t{1} << 20}) {
    auto tensor = MakePatternTensor(DType::kUInt8, *TensorShape::Create({100000}), 3);
    ASSERT_TRUE(tensor.ok());
    auto decoded = RoundTrip(*tensor, chunk);
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_TRUE(VerifyPattern(*decoded, 3).ok()) << chunk;
  }
}

TEST(TensorCodecTest, RoundTripsStrings) {
  auto tensor = MakePatternTensor(DType::kString, *TensorShape::Create({50}), 8);
  ASSERT_TRUE(tensor.ok());
  auto decoded = RoundTrip(*tensor, 7);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(VerifyPattern(*decoded, 8).ok());
}

TEST(TensorCodecTest, ZeroCopyChunkSharesTheTensorBuffer) {
  auto tensor = MakePatternTensor(DType::kFloat, *TensorShape::Create({1024}), 1);
  ASSERT_TRUE(tensor.ok());
  auto payload = TensorPayload::Of(*tensor);
  ASSERT_TRUE(payload.ok());
  const long refs_before = tensor->buffer().use_count();
  {
    grpc::ByteBuffer chunk = EncodeChunk(nullptr, *payload, 0, payload->size());
    EXPECT_EQ(tensor->buffer().use_count(), refs_before + 1) << "the chunk must hold the buffer";
    std::vector<grpc::Slice> slices;
    ASSERT_TRUE(chunk.Dump(&slices).ok());
    ASSERT_EQ(slices.size(), 2u);
    EXPECT_EQ(static_cast<const void*>(slices[1].begin()), tensor->data());
  }
  EXPECT_EQ(tensor->buffer().use_count(), refs_before);
}

TEST(TensorCodecTest, RejectsTruncatedAndMisplacedData) {
  auto tensor = MakePatternTensor(DType::kUInt8, *TensorShape::Create({5000}), 1);
  auto payload = TensorPayload::Of(*tensor);
  const TensorMeta meta = MakeTensorMeta(*tensor, false, payload->size(), 0);
  {
    TensorDecoder decoder;
    grpc::ByteBuffer first = EncodeChunk(&meta, *payload, 0, 1000);
    ASSERT_TRUE(decoder.Consume(&first).ok());
    EXPECT_EQ(decoder.Finish().status().code(), absl::StatusCode::kDataLoss);
  }
  {
    TensorDecoder decoder;
    grpc::ByteBuffer first = EncodeChunk(&meta, *payload, 0, 1000);
    ASSERT_TRUE(decoder.Consume(&first).ok());
    grpc::ByteBuffer skipped = EncodeChunk(nullptr, *payload, 2000, 1000);
    EXPECT_EQ(decoder.Consume(&skipped).code(), absl::StatusCode::kDataLoss);
  }
  {
    TensorDecoder decoder;
    grpc::ByteBuffer data_first = EncodeChunk(nullptr, *payload, 0, 1000);
    EXPECT_EQ(decoder.Consume(&data_first).code(), absl::StatusCode::kDataLoss);
  }
  {
    TensorMeta lying = meta;
    lying.set_payload_bytes(4999);
    TensorDecoder decoder;
    grpc::ByteBuffer first = EncodeChunk(&lying, *payload, 0, 10);
    EXPECT_EQ(decoder.Consume(&first).code(), absl::StatusCode::kDataLoss);
  }
}

// A producer may lend a GPU tensor by CUDA IPC only to a consumer that asked.
TEST(TensorCodecTest, RejectsCudaIpcDescriptorsNotAskedFor) {
  auto tensor = MakePatternTensor(DType::kUInt8, *TensorShape::Create({5000}), 1);
  ASSERT_TRUE(tensor.ok());
  TensorMeta meta = MakeTensorMeta(*tensor, false, 0, 0);
  meta.mutable_cuda_ipc()->set_length(5000);
  const TensorPayload none;
  {
    TensorDecoder decoder;
    grpc::ByteBuffer only = EncodeChunk(&meta, none, 0, 0);
    const absl::Status status = decoder.Consume(&only);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
    EXPECT_NE(status.message().find("did not ask"), std::string::npos) << status;
  }
  {
    meta.mutable_cuda_ipc()->set_length(4999);
    TensorDecoder decoder({.stream = HostAllocator(), .transport = nullptr,
                           .cuda_ipc = HostAllocator()});
    grpc::ByteBuffer only = EncodeChunk(&meta, none, 0, 0);
    EXPECT_EQ(decoder.Consume(&only).code(), absl::StatusCode::kDataLoss)
        << "a descriptor whose length differs from the tensor's";
  }
}

}  // namespace
}  // namespace rdv::control
