// The fast path's messages, as they travel through the data plane's
// transport (plugin ABI v3 messages): a consumer's request for the next
// value of a key it received before (or several, batched), its withdrawal
// of a request it no longer waits for, and a producer's notice when that
// value cannot come as the consumer expects it, or is there to be read;
// and the consumer's release of a value it read. Fixed-size, little-endian
// as the host (workers of one cluster share an architecture, as the data
// plane's blobs already assume). Anything that arrives is untrusted until
// Decode* has checked its size, magic, version, kind and bounds.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace rdv::control {

inline constexpr uint32_t kFastPathMagic = 0x46564452;  // "RDVF"
inline constexpr uint16_t kFastPathVersion = 6;
inline constexpr int kFastPathMaxDims = 8;

enum class FastKind : uint16_t {
  kRequest = 1,  // consumer -> producer
  kNotice = 2,   // producer -> consumer
  kWithdraw = 3, // consumer -> producer
  kRelease = 4,  // consumer -> producer
  kRequests = 5,  // consumer -> producer: several requests, in order
};

// What the producer says instead of sending the bytes.
enum class FastNoticeKind : uint16_t {
  kDead = 1,     // the value is dead: the Recv ends with is_dead
  kChanged = 2,  // dtype or shape changed: held for a fetch_held RecvTensor
  kFailed = 3,   // the Recv fails with `code` and `message`
  kWithdrawn = 4,  // the request was withdrawn before it took a value
  kSlowPath = 5,   // too many requests wait here: ask by RecvTensor instead
  kLanded = 6,     // the value was written into the destination the request named
  kReadable = 7,   // the value is held for the consumer to read (then release)
  kReshaped = 8,   // dtype or shape changed (given): held for a held request
};

// The longest remote key a request (for the producer's write) or a
// readable notice (for the consumer's read) may carry.
inline constexpr size_t kMaxPutKeyBytes = 512;

// "Send me the next value of the key you gave me `key_id` for, in step
// `step_id`, as a tagged send under `request_id`, of `bytes` bytes" or,
// with `put`, "write it at `put_address`, reachable by `put_key` (none for
// zero bytes), and tell me when it landed", or, with `read`, "hold it for
// me to read, and tell me where" (no receive is posted for it). With
// `held`, the value is the one a reshaped notice answered `request_id`
// with, now asked for with its own dtype and shape.
struct FastRequest {
  uint64_t key_id = 0;
  int64_t step_id = 0;
  uint64_t request_id = 0;
  uint64_t bytes = 0;
  int32_t dtype = 0;
  uint32_t num_dims = 0;
  int64_t dims[kFastPathMaxDims] = {};
  bool put = false;
  bool read = false;
  bool held = false;
  uint64_t put_address = 0;
  std::string put_key;  // at most kMaxPutKeyBytes
};

// Requests batched into one message (read-ahead's top-ups of a key ask for
// several values at once): each entry is a whole encoded request, taken in
// the order given. At most kMaxBatchedRequests, and no more bytes than the
// transport's message carries (the caller's to split).
inline constexpr size_t kMaxBatchedRequests = 32;

// "I no longer wait for request `request_id` of the key you gave me
// `key_id` for, in step `step_id`: give its value to the next request."
struct FastWithdrawal {
  uint64_t key_id = 0;
  int64_t step_id = 0;
  uint64_t request_id = 0;
};

// "I am done reading transfer `transfer_id` (`bytes` bytes) of the key you
// gave me `key_id` for, in step `step_id`: let it go."
struct FastRelease {
  uint64_t key_id = 0;
  int64_t step_id = 0;
  uint64_t transfer_id = 0;
  uint64_t bytes = 0;
};

struct FastNotice {
  FastNotice() = default;
  FastNotice(uint64_t request, FastNoticeKind notice_kind, int32_t status_code, std::string text)
      : request_id(request), kind(notice_kind), code(status_code), message(std::move(text)) {}

  uint64_t request_id = 0;
  FastNoticeKind kind = FastNoticeKind::kFailed;
  int32_t code = 0;       // absl::StatusCode, for kFailed
  std::string message;    // for kFailed; at most kMaxNoticeText bytes travel
  // For kReadable: the held transfer to read and release, where it is and
  // its remote key (at most kMaxPutKeyBytes).
  uint64_t transfer_id = 0;
  uint64_t address = 0;
  std::string remote_key;
  // For kReshaped: the held value's dtype and shape, as the producer says
  // (checked by the consumer before it allocates anything).
  int32_t dtype = 0;
  uint32_t num_dims = 0;
  int64_t dims[kFastPathMaxDims] = {};
};
inline constexpr size_t kMaxNoticeText = 400;

std::string EncodeFastRequest(const FastRequest& request);
std::string EncodeFastWithdrawal(const FastWithdrawal& withdrawal);
std::string EncodeFastNotice(const FastNotice& notice);
std::string EncodeFastRelease(const FastRelease& release);
// The batch of `requests` (encoded by EncodeFastRequest; at most
// kMaxBatchedRequests of them), and how many bytes a batch of requests of
// `bytes` bytes together, `count` of them, takes.
std::string EncodeFastRequests(absl::Span<const std::string> requests);
size_t FastRequestsBytes(size_t count, size_t bytes);

// The kind of a message, or INVALID_ARGUMENT naming what is wrong with it.
absl::StatusOr<FastKind> PeekFastKind(absl::string_view message);
absl::StatusOr<FastRequest> DecodeFastRequest(absl::string_view message);
absl::StatusOr<FastWithdrawal> DecodeFastWithdrawal(absl::string_view message);
absl::StatusOr<FastNotice> DecodeFastNotice(absl::string_view message);
absl::StatusOr<FastRelease> DecodeFastRelease(absl::string_view message);
// Every entry checked as DecodeFastRequest checks one: the batch is
// refused whole when one is malformed.
absl::StatusOr<std::vector<FastRequest>> DecodeFastRequests(absl::string_view message);

}  // namespace rdv::control
