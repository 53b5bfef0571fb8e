// RecvTensor's stream, encoded and decoded by hand so that the payload is
// never copied into a protobuf: the producer's chunks point at the tensor's
// own memory (the tensor stays alive until gRPC has sent them), and the
// consumer reads each chunk straight into the destination tensor.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <google/protobuf/io/coded_stream.h>
#include <grpcpp/support/byte_buffer.h>

#include "rdv/control/worker.pb.h"
#include "core/tensor.h"

namespace rdv::control {

// The bytes a host tensor travels as: its own memory for numeric dtypes;
// for strings, each element as varint length + bytes (built once).
class TensorPayload {
 public:
  static absl::StatusOr<TensorPayload> Of(const Tensor& tensor);

  size_t size() const { return size_; }
  const char* data() const { return data_; }
  const std::shared_ptr<Buffer>& owner() const { return owner_; }

 private:
  std::shared_ptr<Buffer> owner_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

TensorMeta MakeTensorMeta(const Tensor& tensor, bool is_dead, size_t payload_bytes,
                          int64_t send_start_micros);

// One RecvTensorChunk: `meta` (first chunk only, else null) and payload
// bytes [offset, offset + length). Pieces of at least kZeroCopyMinBytes
// reference the payload's memory instead of copying it.
inline constexpr size_t kZeroCopyMinBytes = 1024;
grpc::ByteBuffer EncodeChunk(const TensorMeta* meta, const TensorPayload& payload, size_t offset,
                             size_t length);

// Rebuilds the tensor from the chunks of one RecvTensor stream, in order.
class TensorDecoder {
 public:
  // Where numeric tensors are allocated, by how the payload comes.
  struct Allocators {
    std::shared_ptr<Allocator> stream = HostAllocator();  // in the stream: host memory
    // Through the data plane (its pool, or device memory it reaches); null
    // when this worker has none.
    std::shared_ptr<Allocator> transport;
    // Lent by CUDA IPC (device memory); null when the consumer did not ask.
    std::shared_ptr<Allocator> cuda_ipc;
  };

  // The longest meta a chunk may carry (dims, descriptors, addresses).
  static constexpr uint32_t kMaxMetaBytes = 1 << 20;

  TensorDecoder() = default;
  // A tensor above `max_tensor_bytes` (RDV_MAX_TENSOR_BYTES) is refused
  // before anything is allocated for it.
  TensorDecoder(Allocators allocators, uint64_t max_tensor_bytes)
      : allocators_(std::move(allocators)), max_tensor_bytes_(max_tensor_bytes) {}

  // Everything in a chunk is the producer's word, checked before it is
  // used: DATA_LOSS for a chunk that does not fit (a meta that contradicts
  // itself, out-of-order, overflowing or truncated data), INVALID_ARGUMENT
  // for a dtype or shape rdv does not know, RESOURCE_EXHAUSTED for a tensor
  // above the limit. Memory grows with what arrived: string tensors are
  // built only once their bytes are all here.
  absl::Status Consume(grpc::ByteBuffer* chunk);

  bool has_meta() const { return has_meta_; }
  // Meta and every payload byte have arrived.
  bool complete() const { return has_meta_ && received_ == meta_.payload_bytes(); }
  // Payload bytes written into tensor() so far (in order).
  uint64_t received_bytes() const { return received_; }
  // The payload moves through a data-plane transport into tensor().
  bool has_transport() const { return has_meta_ && meta_.has_transport(); }
  // The payload is copied by CUDA IPC into tensor().
  bool has_cuda_ipc() const { return has_meta_ && meta_.has_cuda_ipc(); }
  // The producer holds the value for a fetch_held call; no tensor here.
  bool held() const { return has_meta_ && meta_.payload_held(); }
  const Tensor& tensor() const { return tensor_; }
  const TensorMeta& meta() const { return meta_; }

  // Hands over the finished tensor (the decoder keeps no reference, so its
  // memory is free once the caller lets go); DATA_LOSS when the stream ended
  // before all payload bytes arrived. Once. A dead tensor has the dtype and shape it was sent with,
  // in zeroed host memory (uninitialized when it was sent uninitialized).
  absl::StatusOr<Tensor> Finish();

 private:
  absl::Status ConsumeMeta(google::protobuf::io::CodedInputStream* in);
  absl::Status ConsumeData(google::protobuf::io::CodedInputStream* in, uint64_t offset);
  absl::Status CheckMetaIsConsistent() const;
  absl::Status ReadDTypeAndShape();
  // RESOURCE_EXHAUSTED above max_tensor_bytes_.
  absl::Status CheckTensorBytes(size_t bytes) const;
  absl::Status StartTensor();
  absl::Status StartDeadTensor();
  absl::Status DecodeStrings();

  const Allocators allocators_{};
  const uint64_t max_tensor_bytes_ = uint64_t{64} << 30;
  bool has_meta_ = false;
  TensorMeta meta_;
  DType dtype_ = DType::kInvalid;
  TensorShape shape_;
  Tensor tensor_;  // a string tensor only once Finish has split its bytes
  std::string string_payload_;  // strings arrive here, then are split
  char* destination_ = nullptr;
  uint64_t received_ = 0;
};

}  // namespace rdv::control
