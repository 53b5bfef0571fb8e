// absl::Status <-> grpc::Status. The codes share their numbers; messages
// travel unchanged, so an error keeps its root cause across workers.
#pragma once

#include <grpcpp/support/server_callback.h>
#include <grpcpp/support/status.h>

#include "core/status.h"

namespace rdv::control {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// Finishes a unary callback RPC with `status` (its response as filled).
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* context, const absl::Status& status);

}  // namespace rdv::control
