// absl::Status <-> grpc::Status. The codes share their numbers; messages
// travel unchanged, so an error keeps its root cause across workers.
#pragma once

#include <grpcpp/support/status.h>

#include "core/status.h"

namespace rdv::control {

grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace rdv::control
