#include "control/fast_path_wire.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace rdv::control {
namespace {

struct Header {
  uint32_t magic;
  uint16_t version;
  uint16_t kind;
};

struct RequestWire {
  Header header;
  uint64_t key_id;
  int64_t step_id;
  uint64_t request_id;
  uint64_t bytes;
  int32_t dtype;
  uint32_t num_dims;
  int64_t dims[kFastPathMaxDims];
  uint64_t put_address;
  uint32_t put_key_length;  // the key's bytes follow the struct
  uint32_t flags;           // kRequestPut, kRequestRead, kRequestHeld
};

constexpr uint32_t kRequestPut = 1;
constexpr uint32_t kRequestRead = 2;
constexpr uint32_t kRequestHeld = 4;

struct WithdrawalWire {
  Header header;
  uint64_t key_id;
  int64_t step_id;
  uint64_t request_id;
};

struct NoticeWire {
  Header header;
  uint64_t request_id;
  uint16_t kind;
  uint16_t text_length;
  int32_t code;
  char text[kMaxNoticeText];
  uint64_t transfer_id;
  uint64_t address;
  uint32_t key_length;  // the key's bytes follow the struct
  int32_t dtype;
  uint32_t num_dims;
  uint32_t reserved;
  int64_t dims[kFastPathMaxDims];
};

// Followed by `count` entries, each a uint32 length and that many bytes of
// an encoded request.
struct RequestsWire {
  Header header;
  uint32_t count;
  uint32_t reserved;
};

struct ReleaseWire {
  Header header;
  uint64_t key_id;
  int64_t step_id;
  uint64_t transfer_id;
  uint64_t bytes;
};

Header HeaderOf(FastKind kind) {
  return {kFastPathMagic, kFastPathVersion, static_cast<uint16_t>(kind)};
}

template <typename Wire>
std::string Bytes(const Wire& wire) {
  return std::string(reinterpret_cast<const char*>(&wire), sizeof(wire));
}

absl::Status CheckHeader(absl::string_view message);

// What `trailing` says of a message whose entries check their own bounds.
constexpr size_t kAnyTrailing = SIZE_MAX;

// `trailing`: the bytes that follow the struct, as the struct itself says.
template <typename Wire>
absl::StatusOr<Wire> Read(absl::string_view message, FastKind kind,
                          size_t (*trailing)(const Wire&) = nullptr) {
  if (absl::Status header = CheckHeader(message); !header.ok()) return header;
  if (message.size() < sizeof(Wire)) {
    return absl::InvalidArgumentError(absl::StrCat("a fast-path message of ", message.size(),
                                                   " bytes; this kind has at least ", sizeof(Wire)));
  }
  Wire wire;
  std::memcpy(&wire, message.data(), sizeof(wire));
  if (wire.header.kind != static_cast<uint16_t>(kind)) {
    return absl::InvalidArgumentError("a fast-path message of another kind");
  }
  const size_t trails = trailing != nullptr ? trailing(wire) : 0;
  if (trails == kAnyTrailing) return wire;
  const size_t expected = sizeof(Wire) + trails;
  if (message.size() != expected) {
    return absl::InvalidArgumentError(absl::StrCat("a fast-path message of ", message.size(),
                                                   " bytes; it says it has ", expected));
  }
  return wire;
}

}  // namespace

std::string EncodeFastRequest(const FastRequest& request) {
  RequestWire wire{};
  wire.header = HeaderOf(FastKind::kRequest);
  wire.key_id = request.key_id;
  wire.step_id = request.step_id;
  wire.request_id = request.request_id;
  wire.bytes = request.bytes;
  wire.dtype = request.dtype;
  wire.num_dims = request.num_dims;
  std::memcpy(wire.dims, request.dims, sizeof(wire.dims));
  wire.put_address = request.put_address;
  wire.put_key_length = static_cast<uint32_t>(request.put_key.size());
  wire.flags = (request.put ? kRequestPut : 0) | (request.read ? kRequestRead : 0) |
               (request.held ? kRequestHeld : 0);
  return Bytes(wire) + request.put_key;
}

std::string EncodeFastWithdrawal(const FastWithdrawal& withdrawal) {
  WithdrawalWire wire{};
  wire.header = HeaderOf(FastKind::kWithdraw);
  wire.key_id = withdrawal.key_id;
  wire.step_id = withdrawal.step_id;
  wire.request_id = withdrawal.request_id;
  return Bytes(wire);
}

std::string EncodeFastNotice(const FastNotice& notice) {
  NoticeWire wire{};
  wire.header = HeaderOf(FastKind::kNotice);
  wire.request_id = notice.request_id;
  wire.kind = static_cast<uint16_t>(notice.kind);
  wire.code = notice.code;
  wire.text_length = static_cast<uint16_t>(std::min(notice.message.size(), kMaxNoticeText));
  std::memcpy(wire.text, notice.message.data(), wire.text_length);
  wire.transfer_id = notice.transfer_id;
  wire.address = notice.address;
  wire.key_length = static_cast<uint32_t>(notice.remote_key.size());
  wire.dtype = notice.dtype;
  wire.num_dims = notice.num_dims;
  std::memcpy(wire.dims, notice.dims, sizeof(wire.dims));
  return Bytes(wire) + notice.remote_key;
}

std::string EncodeFastRelease(const FastRelease& release) {
  ReleaseWire wire{};
  wire.header = HeaderOf(FastKind::kRelease);
  wire.key_id = release.key_id;
  wire.step_id = release.step_id;
  wire.transfer_id = release.transfer_id;
  wire.bytes = release.bytes;
  return Bytes(wire);
}

size_t FastRequestsBytes(size_t count, size_t bytes) {
  return sizeof(RequestsWire) + count * sizeof(uint32_t) + bytes;
}

std::string EncodeFastRequests(absl::Span<const std::string> requests) {
  RequestsWire wire{};
  wire.header = HeaderOf(FastKind::kRequests);
  wire.count = static_cast<uint32_t>(requests.size());
  std::string message = Bytes(wire);
  for (const std::string& request : requests) {
    const auto length = static_cast<uint32_t>(request.size());
    message.append(reinterpret_cast<const char*>(&length), sizeof(length));
    message += request;
  }
  return message;
}

namespace {

absl::Status CheckHeader(absl::string_view message) { return PeekFastKind(message).status(); }

}  // namespace

absl::StatusOr<FastKind> PeekFastKind(absl::string_view message) {
  Header header;
  if (message.size() < sizeof(header)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path message of ", message.size(), " bytes: too short"));
  }
  std::memcpy(&header, message.data(), sizeof(header));
  if (header.magic != kFastPathMagic) {
    return absl::InvalidArgumentError("not a fast-path message (wrong magic)");
  }
  if (header.version != kFastPathVersion) {
    return absl::InvalidArgumentError(absl::StrCat("a fast-path message of version ",
                                                   header.version, "; this worker speaks ",
                                                   kFastPathVersion));
  }
  if (header.kind < static_cast<uint16_t>(FastKind::kRequest) ||
      header.kind > static_cast<uint16_t>(FastKind::kRequests)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path message of unknown kind ", header.kind));
  }
  return static_cast<FastKind>(header.kind);
}

absl::StatusOr<FastRequest> DecodeFastRequest(absl::string_view message) {
  absl::StatusOr<RequestWire> wire = Read<RequestWire>(
      message, FastKind::kRequest, [](const RequestWire& w) { return size_t{w.put_key_length}; });
  if (!wire.ok()) return wire.status();
  if (wire->num_dims > kFastPathMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path request of ", wire->num_dims, " dimensions"));
  }
  if (wire->flags & ~(kRequestPut | kRequestRead | kRequestHeld)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path request with unknown flags ", wire->flags));
  }
  if ((wire->flags & kRequestPut) && (wire->flags & kRequestRead)) {
    return absl::InvalidArgumentError("a fast-path request for both a write and a read");
  }
  if (wire->put_key_length > kMaxPutKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a fast-path request with a remote key of ", wire->put_key_length, " bytes"));
  }
  FastRequest request;
  request.key_id = wire->key_id;
  request.step_id = wire->step_id;
  request.request_id = wire->request_id;
  request.bytes = wire->bytes;
  request.dtype = wire->dtype;
  request.num_dims = wire->num_dims;
  std::memcpy(request.dims, wire->dims, sizeof(request.dims));
  request.put = (wire->flags & kRequestPut) != 0;
  request.read = (wire->flags & kRequestRead) != 0;
  request.held = (wire->flags & kRequestHeld) != 0;
  request.put_address = wire->put_address;
  const absl::string_view put_key = message.substr(sizeof(RequestWire));
  request.put_key.assign(put_key.data(), put_key.size());
  return request;
}

absl::StatusOr<FastWithdrawal> DecodeFastWithdrawal(absl::string_view message) {
  absl::StatusOr<WithdrawalWire> wire = Read<WithdrawalWire>(message, FastKind::kWithdraw);
  if (!wire.ok()) return wire.status();
  return FastWithdrawal{wire->key_id, wire->step_id, wire->request_id};
}

absl::StatusOr<FastNotice> DecodeFastNotice(absl::string_view message) {
  absl::StatusOr<NoticeWire> wire = Read<NoticeWire>(
      message, FastKind::kNotice, [](const NoticeWire& w) { return size_t{w.key_length}; });
  if (!wire.ok()) return wire.status();
  if (wire->kind < static_cast<uint16_t>(FastNoticeKind::kDead) ||
      wire->kind > static_cast<uint16_t>(FastNoticeKind::kReshaped) ||
      wire->text_length > kMaxNoticeText) {
    return absl::InvalidArgumentError("a fast-path notice of unknown kind or length");
  }
  if (wire->key_length > kMaxPutKeyBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path notice with a remote key of ", wire->key_length, " bytes"));
  }
  if (wire->num_dims > kFastPathMaxDims) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path notice of ", wire->num_dims, " dimensions"));
  }
  FastNotice notice;
  notice.request_id = wire->request_id;
  notice.kind = static_cast<FastNoticeKind>(wire->kind);
  // A failure says why with a code of absl's; anything else is UNKNOWN.
  notice.code = wire->code > 0 && wire->code <= 16 ? wire->code : 2;
  notice.message.assign(wire->text, wire->text_length);
  notice.transfer_id = wire->transfer_id;
  notice.address = wire->address;
  notice.dtype = wire->dtype;
  notice.num_dims = wire->num_dims;
  std::memcpy(notice.dims, wire->dims, sizeof(notice.dims));
  const absl::string_view key = message.substr(sizeof(NoticeWire));
  notice.remote_key.assign(key.data(), key.size());
  return notice;
}

absl::StatusOr<std::vector<FastRequest>> DecodeFastRequests(absl::string_view message) {
  absl::StatusOr<RequestsWire> wire = Read<RequestsWire>(
      message, FastKind::kRequests, [](const RequestsWire&) { return kAnyTrailing; });
  if (!wire.ok()) return wire.status();
  if (wire->count == 0 || wire->count > kMaxBatchedRequests) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path batch of ", wire->count, " requests; at most ",
                     kMaxBatchedRequests, " and at least one travel together"));
  }
  absl::string_view rest = message.substr(sizeof(RequestsWire));
  std::vector<FastRequest> requests;
  requests.reserve(wire->count);
  for (uint32_t i = 0; i < wire->count; ++i) {
    uint32_t length = 0;
    if (rest.size() < sizeof(length)) {
      return absl::InvalidArgumentError(absl::StrCat("a fast-path batch cut at entry ", i));
    }
    std::memcpy(&length, rest.data(), sizeof(length));
    rest.remove_prefix(sizeof(length));
    if (length > rest.size()) {
      return absl::InvalidArgumentError(absl::StrCat("a fast-path batch whose entry ", i, " has ",
                                                     length, " bytes, past its end"));
    }
    absl::StatusOr<FastRequest> request = DecodeFastRequest(rest.substr(0, length));
    if (!request.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a fast-path batch's entry ", i, ": ", request.status().message()));
    }
    requests.push_back(*std::move(request));
    rest.remove_prefix(length);
  }
  if (!rest.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fast-path batch with ", rest.size(), " bytes after its last entry"));
  }
  return requests;
}

absl::StatusOr<FastRelease> DecodeFastRelease(absl::string_view message) {
  absl::StatusOr<ReleaseWire> wire = Read<ReleaseWire>(message, FastKind::kRelease);
  if (!wire.ok()) return wire.status();
  return FastRelease{wire->key_id, wire->step_id, wire->transfer_id, wire->bytes};
}

}  // namespace rdv::control
