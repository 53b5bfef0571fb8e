#include "control/tensor_codec.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/wire_format_lite.h>
#include <grpcpp/support/proto_buffer_reader.h>

#include "absl/strings/str_cat.h"
#include "control/protocol.h"

namespace rdv::control {
namespace {

using google::protobuf::internal::WireFormatLite;

constexpr int kMetaField = RecvTensorChunk::kMetaFieldNumber;
constexpr int kOffsetField = RecvTensorChunk::kOffsetFieldNumber;
constexpr int kDataField = RecvTensorChunk::kDataFieldNumber;

void AppendVarint(std::string* out, uint64_t value) {
  uint8_t bytes[10];  // the longest varint
  uint8_t* end = google::protobuf::io::CodedOutputStream::WriteVarint64ToArray(value, bytes);
  out->append(reinterpret_cast<const char*>(bytes), static_cast<size_t>(end - bytes));
}

void AppendTag(std::string* out, int field, WireFormatLite::WireType type) {
  AppendVarint(out, WireFormatLite::MakeTag(field, type));
}

void ReleaseBufferRef(void* owner) { delete static_cast<std::shared_ptr<Buffer>*>(owner); }

absl::Status Corrupt(absl::string_view why) {
  return absl::DataLossError(absl::StrCat("RecvTensor stream is corrupt: ", why));
}

}  // namespace

absl::StatusOr<TensorPayload> TensorPayload::Of(const Tensor& tensor) {
  TensorPayload payload;
  if (!tensor.IsInitialized()) return payload;
  if (!tensor.location().is_host()) {
    return absl::InvalidArgumentError("TensorPayload::Of needs a host tensor");
  }
  if (tensor.dtype() != DType::kString) {
    payload.owner_ = tensor.buffer();
    payload.data_ = static_cast<const char*>(tensor.data());
    payload.size_ = tensor.TotalBytes();
    return payload;
  }
  auto* bytes = new std::string();
  for (int64_t i = 0; i < tensor.num_elements(); ++i) {
    const std::string& element = tensor.flat<std::string>()[i];
    AppendVarint(bytes, element.size());
    bytes->append(element);
  }
  payload.data_ = bytes->data();
  payload.size_ = bytes->size();
  payload.owner_ = Buffer::Wrap(bytes->data(), bytes->size(), MemoryLocation::Host(),
                                [bytes] { delete bytes; });
  return payload;
}

TensorMeta MakeTensorMeta(const Tensor& tensor, bool is_dead, size_t payload_bytes,
                          int64_t send_start_micros) {
  TensorMeta meta;
  meta.set_dtype(static_cast<int>(tensor.dtype()));
  for (const int64_t d : tensor.shape().dims()) meta.add_dims(d);
  meta.set_is_dead(is_dead);
  meta.set_payload_bytes(payload_bytes);
  meta.set_send_start_micros(send_start_micros);
  meta.set_protocol_version(kProtocolVersion);
  return meta;
}

grpc::ByteBuffer EncodeChunk(const TensorMeta* meta, const TensorPayload& payload, size_t offset,
                             size_t length) {
  std::string header;
  if (meta != nullptr) {
    AppendTag(&header, kMetaField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
    AppendVarint(&header, meta->ByteSizeLong());
    meta->AppendToString(&header);
  }
  AppendTag(&header, kOffsetField, WireFormatLite::WIRETYPE_VARINT);
  AppendVarint(&header, offset);
  AppendTag(&header, kDataField, WireFormatLite::WIRETYPE_LENGTH_DELIMITED);
  AppendVarint(&header, length);
  const char* data = payload.data() + offset;
  if (length < kZeroCopyMinBytes) {
    header.append(data, length);
    grpc::Slice slice(header);
    return grpc::ByteBuffer(&slice, 1);
  }
  grpc::Slice slices[2] = {
      grpc::Slice(header),
      // gRPC sends straight from the tensor's memory and drops the
      // reference when it is done with it.
      grpc::Slice(const_cast<char*>(data), length, &ReleaseBufferRef,
                  new std::shared_ptr<Buffer>(payload.owner())),
  };
  return grpc::ByteBuffer(slices, 2);
}

absl::Status TensorDecoder::Consume(grpc::ByteBuffer* chunk) {
  grpc::ProtoBufferReader reader(chunk);
  google::protobuf::io::CodedInputStream in(&reader);
  // A message gRPC delivered fits in an int (its size limits are below 2 GiB).
  in.SetTotalBytesLimit(static_cast<int>(std::min<size_t>(chunk->Length(), INT_MAX)));
  uint64_t offset = 0;
  while (const uint32_t tag = in.ReadTag()) {
    const int field = WireFormatLite::GetTagFieldNumber(tag);
    const bool delimited =
        WireFormatLite::GetTagWireType(tag) == WireFormatLite::WIRETYPE_LENGTH_DELIMITED;
    if (field == kMetaField && delimited) {
      RDV_RETURN_IF_ERROR(ConsumeMeta(&in));
    } else if (field == kOffsetField) {
      if (!in.ReadVarint64(&offset)) return Corrupt("unreadable offset");
    } else if (field == kDataField && delimited) {
      RDV_RETURN_IF_ERROR(ConsumeData(&in, offset));
    } else if (!WireFormatLite::SkipField(&in, tag)) {
      return Corrupt("unreadable field");
    }
  }
  return absl::OkStatus();
}

absl::Status TensorDecoder::ConsumeMeta(google::protobuf::io::CodedInputStream* in) {
  uint32_t length = 0;
  if (has_meta_) return Corrupt("a second meta");
  if (!in->ReadVarint32(&length) || length > kMaxMetaBytes) {
    return Corrupt(absl::StrCat("a meta of ", length, " bytes (the most is ", kMaxMetaBytes, ")"));
  }
  const auto limit = in->PushLimit(static_cast<int>(length));
  if (!meta_.ParseFromCodedStream(in) || !in->ConsumedEntireMessage()) {
    return Corrupt("meta does not parse");
  }
  in->PopLimit(limit);
  has_meta_ = true;
  if (meta_.protocol_version() != kProtocolVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "RecvTensor answer refused: ",
        VersionMismatch("the producer", meta_.protocol_version(), "this worker")));
  }
  RDV_RETURN_IF_ERROR(CheckMetaIsConsistent());
  return StartTensor();
}

absl::Status TensorDecoder::ConsumeData(google::protobuf::io::CodedInputStream* in,
                                        uint64_t offset) {
  uint32_t length = 0;
  if (!has_meta_) return Corrupt("data before meta");
  if (!in->ReadVarint32(&length)) return Corrupt("unreadable data length");
  if (offset != received_ || length > meta_.payload_bytes() - received_) {
    return Corrupt(absl::StrCat("chunk [", offset, ", +", length, ") does not follow byte ",
                                received_, " of ", meta_.payload_bytes()));
  }
  // Checked before a string payload grows for them: the bytes must be here.
  if (static_cast<int64_t>(length) > in->BytesUntilTotalBytesLimit()) {
    return Corrupt(absl::StrCat("a chunk declares ", length, " data bytes and carries ",
                                in->BytesUntilTotalBytesLimit()));
  }
  if (length == 0) return absl::OkStatus();
  char* destination = destination_;
  if (dtype_ == DType::kString) {
    string_payload_.resize(received_ + length);
    destination = string_payload_.data();
  }
  if (!in->ReadRaw(destination + received_, static_cast<int>(length))) {
    return Corrupt("truncated data");
  }
  received_ += length;
  return absl::OkStatus();
}

absl::Status TensorDecoder::CheckMetaIsConsistent() const {
  const bool described = meta_.has_transport() || meta_.has_cuda_ipc();
  if (meta_.payload_held() && (meta_.payload_bytes() != 0 || described)) {
    return Corrupt("a held payload with bytes or a descriptor");
  }
  if (meta_.is_dead() && (meta_.payload_bytes() != 0 || described)) {
    return Corrupt("a dead tensor with payload bytes or a descriptor");
  }
  if (meta_.has_transport() && meta_.transport().op() != TRANSFER_OP_GET &&
      meta_.transport().op() != TRANSFER_OP_TAG) {
    return Corrupt(absl::StrCat("a transport descriptor of unknown operation ",
                                static_cast<int>(meta_.transport().op())));
  }
  if (meta_.has_transport() && meta_.has_cuda_ipc()) {
    return Corrupt("both a transport and a CUDA IPC descriptor");
  }
  if (described && meta_.payload_bytes() != 0) {
    return Corrupt("payload bytes in the stream and a descriptor");
  }
  return absl::OkStatus();
}

absl::Status TensorDecoder::ReadDTypeAndShape() {
  RDV_ASSIGN_OR_RETURN(dtype_, DTypeFromEnumValue(meta_.dtype()));
  RDV_ASSIGN_OR_RETURN(shape_, TensorShape::Create(absl::MakeConstSpan(
                                   meta_.dims().data(), static_cast<size_t>(meta_.dims_size()))));
  return absl::OkStatus();
}

absl::Status TensorDecoder::CheckTensorBytes(size_t bytes) const {
  if (bytes <= max_tensor_bytes_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "the producer's ", DTypeName(dtype_), " tensor of shape ", shape_.DebugString(), " has ",
      bytes, " bytes; this worker accepts at most ", max_tensor_bytes_,
      " (RDV_MAX_TENSOR_BYTES)"));
}

// TensorFlow keeps a dead tensor's dtype and shape (its bytes are never
// read); so does rdv, in zeroed host memory. A producer that sent an
// uninitialized tensor (dtype 0) gets one back.
absl::Status TensorDecoder::StartDeadTensor() {
  if (meta_.dtype() == static_cast<int>(DType::kInvalid)) return absl::OkStatus();
  RDV_RETURN_IF_ERROR(ReadDTypeAndShape());
  RDV_ASSIGN_OR_RETURN(const size_t bytes, TensorBytes(dtype_, shape_.num_elements()));
  RDV_RETURN_IF_ERROR(CheckTensorBytes(bytes));
  RDV_ASSIGN_OR_RETURN(tensor_, Tensor::Allocate(HostAllocator(), dtype_, shape_));
  if (dtype_ != DType::kString && bytes > 0) std::memset(tensor_.data(), 0, bytes);
  return absl::OkStatus();
}

absl::Status TensorDecoder::StartTensor() {
  if (meta_.payload_held()) return absl::OkStatus();
  if (meta_.is_dead()) return StartDeadTensor();
  RDV_RETURN_IF_ERROR(ReadDTypeAndShape());
  if (dtype_ == DType::kString) {
    if (meta_.has_transport() || meta_.has_cuda_ipc()) {
      return Corrupt("a descriptor for a string tensor (strings travel in the stream)");
    }
    const uint64_t limit = std::min<uint64_t>(max_tensor_bytes_, INT_MAX);
    if (meta_.payload_bytes() > limit) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the producer's string tensor has ", meta_.payload_bytes(),
                       " payload bytes; this worker accepts at most ", limit,
                       " (RDV_MAX_TENSOR_BYTES, and 2 GiB for strings)"));
    }
    // Every element takes at least its one-byte length.
    if (static_cast<uint64_t>(shape_.num_elements()) > meta_.payload_bytes()) {
      return Corrupt(absl::StrCat(shape_.num_elements(), " string elements cannot fit in ",
                                  meta_.payload_bytes(), " payload bytes"));
    }
    return absl::OkStatus();
  }
  RDV_ASSIGN_OR_RETURN(const size_t bytes, TensorBytes(dtype_, shape_.num_elements()));
  RDV_RETURN_IF_ERROR(CheckTensorBytes(bytes));
  const bool lent = meta_.has_cuda_ipc();
  if (lent && allocators_.cuda_ipc == nullptr) {
    return Corrupt("a CUDA IPC descriptor the consumer did not ask for");
  }
  if (meta_.has_transport() && allocators_.transport == nullptr) {
    return absl::FailedPreconditionError(
        "the producer answered with a transport descriptor, but this worker has no data plane");
  }
  if (meta_.has_transport() || lent) {
    const uint64_t length = lent ? meta_.cuda_ipc().length() : meta_.transport().length();
    if (length != bytes) {
      return Corrupt(absl::StrCat(lent ? "a CUDA IPC" : "a transport", " descriptor of ", length,
                                  " bytes for a ", DTypeName(dtype_), " tensor of shape ",
                                  shape_.DebugString(), " (", bytes, " bytes)"));
    }
  } else if (meta_.payload_bytes() != bytes) {
    return Corrupt(absl::StrCat("payload of ", meta_.payload_bytes(), " bytes for a ",
                                DTypeName(dtype_), " tensor of shape ", shape_.DebugString(),
                                " (", bytes, " bytes)"));
  }
  std::shared_ptr<Allocator> allocator = lent                   ? allocators_.cuda_ipc
                                         : meta_.has_transport() ? allocators_.transport
                                                                 : allocators_.stream;
  RDV_ASSIGN_OR_RETURN(tensor_, Tensor::Allocate(std::move(allocator), dtype_, shape_));
  if (!meta_.has_transport() && !lent) destination_ = static_cast<char*>(tensor_.data());
  return absl::OkStatus();
}

absl::Status TensorDecoder::DecodeStrings() {
  RDV_ASSIGN_OR_RETURN(tensor_, Tensor::Allocate(HostAllocator(), DType::kString, shape_));
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(string_payload_.data()),
                                            static_cast<int>(string_payload_.size()));
  for (int64_t i = 0; i < tensor_.num_elements(); ++i) {
    uint32_t length = 0;
    if (!in.ReadVarint32(&length) || length > static_cast<uint32_t>(in.BytesUntilLimit()) ||
        !in.ReadString(&tensor_.flat<std::string>()[i], static_cast<int>(length))) {
      return Corrupt(absl::StrCat("string element ", i, " is truncated"));
    }
  }
  if (!in.ExpectAtEnd()) return Corrupt("bytes after the last string element");
  std::string().swap(string_payload_);
  return absl::OkStatus();
}

absl::StatusOr<Tensor> TensorDecoder::Finish() {
  if (!has_meta_) return Corrupt("the stream ended before the tensor's metadata");
  if (meta_.payload_held()) return absl::InternalError("the payload is held by the producer");
  if (meta_.is_dead()) return std::move(tensor_);
  if (received_ != meta_.payload_bytes()) {
    return Corrupt(absl::StrCat("the stream ended after ", received_, " of ",
                                meta_.payload_bytes(), " bytes"));
  }
  if (dtype_ == DType::kString && !tensor_.IsInitialized()) RDV_RETURN_IF_ERROR(DecodeStrings());
  return std::move(tensor_);
}

}  // namespace rdv::control
