// The fast path's messages on any bytes: whatever a transport peer sends
// reaches these decoders first (control/fast_path.h). A message they accept
// encodes back to the same bytes' meaning (decode(encode(decoded)) ==
// decoded), and nothing they accept names more dimensions, or carries a
// longer remote key, than fit.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "control/fast_path_wire.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rdv::control;
  const absl::string_view message(reinterpret_cast<const char*>(data), size);
  if (!PeekFastKind(message).ok()) return 0;
  if (absl::StatusOr<FastRequest> request = DecodeFastRequest(message); request.ok()) {
    if (request->num_dims > kFastPathMaxDims || request->put_key.size() > kMaxPutKeyBytes) {
      std::abort();
    }
    absl::StatusOr<FastRequest> again = DecodeFastRequest(EncodeFastRequest(*request));
    if (!again.ok() || again->key_id != request->key_id || again->bytes != request->bytes ||
        std::memcmp(again->dims, request->dims, sizeof(request->dims)) != 0 ||
        again->put != request->put || again->read != request->read ||
        again->held != request->held || again->put_address != request->put_address ||
        again->put_key != request->put_key) {
      std::abort();
    }
  }
  if (absl::StatusOr<std::vector<FastRequest>> requests = DecodeFastRequests(message);
      requests.ok()) {
    if (requests->empty() || requests->size() > kMaxBatchedRequests) std::abort();
    std::vector<std::string> encoded;
    for (const FastRequest& request : *requests) encoded.push_back(EncodeFastRequest(request));
    absl::StatusOr<std::vector<FastRequest>> again = DecodeFastRequests(EncodeFastRequests(encoded));
    if (!again.ok() || again->size() != requests->size()) std::abort();
    for (size_t i = 0; i < requests->size(); ++i) {
      if ((*again)[i].request_id != (*requests)[i].request_id ||
          (*again)[i].put_key != (*requests)[i].put_key) {
        std::abort();
      }
    }
  }
  if (absl::StatusOr<FastRelease> release = DecodeFastRelease(message); release.ok()) {
    absl::StatusOr<FastRelease> again = DecodeFastRelease(EncodeFastRelease(*release));
    if (!again.ok() || again->key_id != release->key_id || again->step_id != release->step_id ||
        again->transfer_id != release->transfer_id || again->bytes != release->bytes) {
      std::abort();
    }
  }
  if (absl::StatusOr<FastWithdrawal> withdrawal = DecodeFastWithdrawal(message); withdrawal.ok()) {
    absl::StatusOr<FastWithdrawal> again = DecodeFastWithdrawal(EncodeFastWithdrawal(*withdrawal));
    if (!again.ok() || again->key_id != withdrawal->key_id ||
        again->step_id != withdrawal->step_id || again->request_id != withdrawal->request_id) {
      std::abort();
    }
  }
  if (absl::StatusOr<FastNotice> notice = DecodeFastNotice(message); notice.ok()) {
    if (notice->message.size() > kMaxNoticeText || notice->code <= 0 || notice->code > 16 ||
        notice->num_dims > kFastPathMaxDims) {
      std::abort();
    }
    absl::StatusOr<FastNotice> again = DecodeFastNotice(EncodeFastNotice(*notice));
    if (!again.ok() || again->message != notice->message || again->kind != notice->kind ||
        again->remote_key != notice->remote_key || again->dtype != notice->dtype ||
        std::memcmp(again->dims, notice->dims, sizeof(notice->dims)) != 0) {
      std::abort();
    }
  }
  return 0;
}
