// What the torch backend's process group shares between its files
// (process_group.cc: set-up, send, recv, barrier; process_group_goodbye.cc:
// how ranks part): how it raises to Python and the messages it sends itself.
#pragma once

#include <stdexcept>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/allocator.h"
#include "core/rendezvous.h"
#include "core/status.h"
#include "core/tensor.h"

namespace rdv::pytorch {

// Raised in Python as RuntimeError("rdv: CODE: message").
[[noreturn]] inline void Throw(const absl::Status& status) {
  throw std::runtime_error(absl::StrCat("rdv: ", status.ToString()));
}

template <typename T>
T ValueOrThrow(absl::StatusOr<T> value) {
  if (!value.ok()) Throw(value.status());
  return *std::move(value);
}

// A zero-byte tensor: barrier messages and farewells.
inline Tensor Signal() {
  return ValueOrThrow(
      Tensor::Allocate(HostAllocator(), DType::kUInt8, ValueOrThrow(TensorShape::Create({0}))));
}

// A Recv into host memory, withdrawn through `cancellation` (may be null).
inline RendezvousArgs HostArgs(CancellationManager* cancellation) {
  RendezvousArgs args;
  args.alloc_attrs.on_host = true;
  args.cancellation_manager = cancellation;
  return args;
}

}  // namespace rdv::pytorch
