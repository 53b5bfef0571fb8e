// RecvTensor chunks as a hostile or broken producer might write them, for
// the decoder's tests and the fake producer of hostile_producer_test.cc.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <grpcpp/support/byte_buffer.h>

#include "control/protocol.h"
#include "rdv/control/worker.pb.h"
#include "core/dtype.h"

namespace rdv::control {

// An optional meta, then a data field that declares `declared` bytes at
// offset 0 and carries `carried`.
inline grpc::ByteBuffer ForgedChunk(const TensorMeta* meta, uint64_t declared,
                                    const std::string& carried) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    if (meta != nullptr) {
      out.WriteTag(RecvTensorChunk::kMetaFieldNumber << 3 | 2);
      out.WriteVarint64(meta->ByteSizeLong());
      meta->SerializeToCodedStream(&out);
    }
    out.WriteTag(RecvTensorChunk::kOffsetFieldNumber << 3);
    out.WriteVarint64(0);
    out.WriteTag(RecvTensorChunk::kDataFieldNumber << 3 | 2);
    out.WriteVarint64(declared);
    out.WriteRaw(carried.data(), static_cast<int>(carried.size()));
  }
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

inline TensorMeta ForgedMeta(DType dtype, std::initializer_list<int64_t> dims,
                             uint64_t payload_bytes) {
  TensorMeta meta;
  meta.set_dtype(static_cast<int>(dtype));
  for (const int64_t d : dims) meta.add_dims(d);
  meta.set_payload_bytes(payload_bytes);
  meta.set_protocol_version(kProtocolVersion);
  return meta;
}

}  // namespace rdv::control
