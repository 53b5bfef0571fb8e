#include "control/tensor_codec.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "absl/strings/str_cat.h"
#include "control/protocol.h"
#include "control/tensor_pattern.h"
#include "tests/control/forged_chunk.h"
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
                           .cuda_ipc = HostAllocator()},
                          /*max_tensor_bytes=*/1 << 20);
    grpc::ByteBuffer only = EncodeChunk(&meta, none, 0, 0);
    EXPECT_EQ(decoder.Consume(&only).code(), absl::StatusCode::kDataLoss)
        << "a descriptor whose length differs from the tensor's";
  }
}

// A data length of 2^31 once turned negative in the decoder; now a chunk
// that declares more than it carries is corrupt, whatever the meta says.
TEST(TensorCodecTest, RefusesDataLengthsBeyondWhatArrived) {
  const uint64_t bytes = (uint64_t{1} << 31) + 16;
  const TensorMeta meta = ForgedMeta(DType::kUInt8, {static_cast<int64_t>(bytes)}, bytes);
  for (const uint64_t declared : {uint64_t{1} << 31, uint64_t{0xffffffff}, uint64_t{1000}}) {
    TensorDecoder decoder;
    grpc::ByteBuffer chunk = ForgedChunk(&meta, declared, std::string(100, 'x'));
    const absl::Status status = decoder.Consume(&chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << declared << ": " << status;
  }
}

// An answer from a producer of another protocol version (or of version 2,
// which sends none) is refused before anything in it is acted on.
TEST(TensorCodecTest, RefusesAnAnswerOfAnotherProtocolVersion) {
  for (const uint32_t version : {0u, kProtocolVersion + 1}) {
    TensorMeta meta = ForgedMeta(DType::kUInt8, {4}, 4);
    meta.set_protocol_version(version);
    TensorDecoder decoder;
    grpc::ByteBuffer chunk = ForgedChunk(&meta, 4, "abcd");
    const absl::Status status = decoder.Consume(&chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
    EXPECT_NE(status.message().find(absl::StrCat("speaks ", kProtocolVersion)), std::string::npos)
        << status;
    EXPECT_FALSE(decoder.tensor().IsInitialized());
  }
}

TEST(TensorCodecTest, RefusesADeadTensorWithPayload) {
  TensorMeta meta = ForgedMeta(DType::kUInt8, {10}, 10);
  meta.set_is_dead(true);
  TensorDecoder decoder;
  grpc::ByteBuffer chunk = ForgedChunk(&meta, 10, std::string(10, 'x'));
  const absl::Status status = decoder.Consume(&chunk);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_NE(status.message().find("dead tensor"), std::string::npos) << status;
}

// TensorFlow's Recv of a dead tensor keeps its dtype and shape.
TEST(TensorCodecTest, ADeadTensorKeepsItsDTypeAndShape) {
  TensorMeta meta = ForgedMeta(DType::kInt32, {2, 3}, 0);
  meta.set_is_dead(true);
  TensorDecoder decoder;
  grpc::ByteBuffer chunk = ForgedChunk(&meta, 0, "");
  ASSERT_TRUE(decoder.Consume(&chunk).ok());
  absl::StatusOr<Tensor> tensor = decoder.Finish();
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_EQ(tensor->dtype(), DType::kInt32);
  EXPECT_EQ(tensor->shape().DebugString(), "[2,3]");
  for (int i = 0; i < 6; ++i) EXPECT_EQ(tensor->flat<int32_t>()[i], 0) << i;
}

TEST(TensorCodecTest, ADeadTensorSentUninitializedStaysUninitialized) {
  TensorMeta meta = MakeTensorMeta(Tensor(), /*is_dead=*/true, 0, 0);
  TensorDecoder decoder;
  grpc::ByteBuffer chunk = ForgedChunk(&meta, 0, "");
  ASSERT_TRUE(decoder.Consume(&chunk).ok());
  absl::StatusOr<Tensor> tensor = decoder.Finish();
  ASSERT_TRUE(tensor.ok()) << tensor.status();
  EXPECT_FALSE(tensor->IsInitialized());
}

TEST(TensorCodecTest, ADeadTensorAboveTheLimitIsRefused) {
  TensorMeta meta = ForgedMeta(DType::kFloat, {1 << 20}, 0);
  meta.set_is_dead(true);
  TensorDecoder decoder({}, /*max_tensor_bytes=*/1 << 20);
  grpc::ByteBuffer chunk = ForgedChunk(&meta, 0, "");
  const absl::Status status = decoder.Consume(&chunk);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
}

TEST(TensorCodecTest, RefusesATensorAboveTheLimitBeforeAllocating) {
  const TensorMeta meta = ForgedMeta(DType::kFloat, {1 << 20}, 4 << 20);
  TensorDecoder decoder({}, /*max_tensor_bytes=*/1 << 20);
  grpc::ByteBuffer chunk = ForgedChunk(&meta, 0, "");
  const absl::Status status = decoder.Consume(&chunk);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted) << status;
  EXPECT_NE(status.message().find("RDV_MAX_TENSOR_BYTES"), std::string::npos) << status;
  EXPECT_FALSE(decoder.tensor().IsInitialized());
}

// String tensors used to allocate their declared payload and elements
// before any byte arrived.
TEST(TensorCodecTest, RefusesStringTensorsThatCannotBeWhatTheyDeclare) {
  {
    TensorDecoder decoder;
    const TensorMeta meta = ForgedMeta(DType::kString, {1}, uint64_t{1} << 40);
    grpc::ByteBuffer chunk = ForgedChunk(&meta, 0, "");
    EXPECT_EQ(decoder.Consume(&chunk).code(), absl::StatusCode::kResourceExhausted);
  }
  {
    TensorDecoder decoder;
    const TensorMeta meta = ForgedMeta(DType::kString, {int64_t{1} << 40}, 100);
    grpc::ByteBuffer chunk = ForgedChunk(&meta, 0, "");
    const absl::Status status = decoder.Consume(&chunk);
    EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  }
  {
    // Legal sizes, lying stream: nothing is built from bytes that never came.
    TensorDecoder decoder;
    const TensorMeta meta = ForgedMeta(DType::kString, {1000}, uint64_t{1} << 30);
    grpc::ByteBuffer chunk = ForgedChunk(&meta, 4000, std::string(4000, '\0'));
    ASSERT_TRUE(decoder.Consume(&chunk).ok());
    EXPECT_FALSE(decoder.tensor().IsInitialized());
    EXPECT_EQ(decoder.Finish().status().code(), absl::StatusCode::kDataLoss);
  }
}

TEST(TensorCodecTest, RefusesUnreadableMetas) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.WriteTag(RecvTensorChunk::kMetaFieldNumber << 3 | 2);
    out.WriteVarint32(0xffffffff);
    out.WriteRaw("abc", 3);
  }
  grpc::Slice slice(bytes);
  grpc::ByteBuffer chunk(&slice, 1);
  TensorDecoder decoder;
  EXPECT_EQ(decoder.Consume(&chunk).code(), absl::StatusCode::kDataLoss);

  TensorDecoder unknown_dtype;
  const TensorMeta meta = ForgedMeta(static_cast<DType>(77), {4}, 4);
  grpc::ByteBuffer with_unknown_dtype = ForgedChunk(&meta, 4, "abcd");
  EXPECT_EQ(unknown_dtype.Consume(&with_unknown_dtype).code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace rdv::control
