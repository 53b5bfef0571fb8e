// Status and StatusOr are Abseil's. Error codes follow TensorFlow's:
// INVALID_ARGUMENT for bad input (a malformed key), ABORTED after
// StartAbort, CANCELLED, DEADLINE_EXCEEDED for timeouts, UNAVAILABLE for a
// lost peer, FAILED_PRECONDITION for a missing capability (no CUDA).
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace rdv {

// `text` as an error message may quote it: C-escaped, at most `max_bytes`
// of escaped text, and when cut, "...(N bytes)" after it. What a peer sent
// may be huge or binary; an error that echoed it whole would be too.
std::string Excerpt(absl::string_view text, size_t max_bytes = 256);

}  // namespace rdv

#define RDV_STATUS_CONCAT_INNER(a, b) a##b
#define RDV_STATUS_CONCAT(a, b) RDV_STATUS_CONCAT_INNER(a, b)

// Returns from the enclosing function when `expr` is not OK.
#define RDV_RETURN_IF_ERROR(expr)                  \
  do {                                             \
    ::absl::Status rdv_status_ = (expr);           \
    if (!rdv_status_.ok()) return rdv_status_;     \
  } while (false)

// `lhs = value of rexpr` or return its error.
#define RDV_ASSIGN_OR_RETURN(lhs, rexpr) \
  RDV_ASSIGN_OR_RETURN_IMPL(RDV_STATUS_CONCAT(rdv_statusor_, __LINE__), lhs, rexpr)
#define RDV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
