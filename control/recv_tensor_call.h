// One RecvTensor call from a consumer to a producer: sends the request,
// decodes the response stream straight into a new host tensor, then (for a
// GPU destination) copies it to the device. Deletes itself when done.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include <grpcpp/support/client_callback.h>

#include "absl/functional/any_invocable.h"
#include "control/tensor_codec.h"
#include "control/worker_cache.h"
#include "core/memory.h"

namespace rdv::control {

class RecvTensorCall final : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  // Runs once, on a gRPC or CUDA completion thread, after the call ended.
  using Done = absl::AnyInvocable<void(absl::Status, Tensor, bool is_dead) &&>;
  // Runs on the same thread right before `done`, to unhook the call from
  // whoever may Abort it; after it returns nobody calls Abort again.
  using Detach = absl::AnyInvocable<void(RecvTensorCall*) &&>;

  RecvTensorCall(std::shared_ptr<WorkerClient> worker, RecvTensorRequest request,
                 MemoryLocation destination, Detach detach, Done done);

  // Starts the call; the object owns itself from here.
  void Start();

  // Ends the call early; the Recv completes with `status` (the first given).
  // Any thread, until Detach has run.
  void Abort(const absl::Status& status);

  void OnReadDone(bool ok) override;
  void OnDone(const grpc::Status& status) override;

 private:
  absl::Status FinalStatus(const grpc::Status& status);
  void Complete(absl::Status status, Tensor tensor, bool is_dead);

  const std::shared_ptr<WorkerClient> worker_;
  const RecvTensorRequest request_;
  const MemoryLocation destination_;
  Detach detach_;
  Done done_;
  grpc::ClientContext context_;
  grpc::ByteBuffer request_buffer_;
  grpc::ByteBuffer response_;
  TensorDecoder decoder_;  // only touched by the reactions, which gRPC serializes
  std::mutex mu_;
  absl::Status abort_status_;  // guarded by mu_
};

}  // namespace rdv::control
