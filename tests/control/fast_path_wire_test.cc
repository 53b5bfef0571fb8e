// The fast path's messages: what one side encodes the other decodes,
// and anything else is refused with a reason before it is used.
#include "control/fast_path_wire.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "gtest/gtest.h"

namespace rdv::control {
namespace {

TEST(FastPathWireTest, ARequestArrivesAsSent) {
  FastRequest request;
  request.key_id = 0x1234567890abcdefull;
  request.step_id = -3;
  request.request_id = 77;
  request.bytes = 4096;
  request.dtype = 1;
  request.num_dims = 2;
  request.dims[0] = 32;
  request.dims[1] = 32;
  const std::string bytes = EncodeFastRequest(request);
  ASSERT_EQ(*PeekFastKind(bytes), FastKind::kRequest);
  absl::StatusOr<FastRequest> decoded = DecodeFastRequest(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->key_id, request.key_id);
  EXPECT_EQ(decoded->step_id, -3);
  EXPECT_EQ(decoded->request_id, 77u);
  EXPECT_EQ(decoded->bytes, 4096u);
  EXPECT_EQ(decoded->num_dims, 2u);
  EXPECT_EQ(decoded->dims[1], 32);
  EXPECT_FALSE(DecodeFastNotice(bytes).ok()) << "a request is not a notice";
}

TEST(FastPathWireTest, AWriteRequestCarriesItsDestination) {
  FastRequest request;
  request.request_id = 5;
  request.put = true;
  request.put_address = 0x7f0012345000ull;
  request.put_key = std::string(kMaxPutKeyBytes, 'k');
  absl::StatusOr<FastRequest> decoded = DecodeFastRequest(EncodeFastRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->put);
  EXPECT_EQ(decoded->put_address, request.put_address);
  EXPECT_EQ(decoded->put_key, request.put_key);
  request.put_key.clear();  // zero bytes: nothing to reach
  decoded = DecodeFastRequest(EncodeFastRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->put);
  EXPECT_TRUE(decoded->put_key.empty());
}

TEST(FastPathWireTest, AWriteRequestsKeyIsBoundedAndMatchesItsLength) {
  FastRequest request;
  request.put = true;
  request.put_key = std::string(kMaxPutKeyBytes + 1, 'k');
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(EncodeFastRequest(request)).status().message(),
                                "remote key"));
  request.put_key = "sealed";
  const std::string bytes = EncodeFastRequest(request);
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(bytes + "x").status().message(), "says it has"));
  EXPECT_FALSE(DecodeFastRequest(bytes.substr(0, bytes.size() - 1)).ok());
  std::string unknown_flags = bytes;
  unknown_flags[unknown_flags.size() - request.put_key.size() - 4] = 8;
  EXPECT_TRUE(
      absl::StrContains(DecodeFastRequest(unknown_flags).status().message(), "unknown flags"));
  request.read = true;
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(EncodeFastRequest(request)).status().message(),
                                "both a write and a read"));
}

TEST(FastPathWireTest, AReadRequestSaysSo) {
  FastRequest request;
  request.request_id = 9;
  request.read = true;
  absl::StatusOr<FastRequest> decoded = DecodeFastRequest(EncodeFastRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->read);
  EXPECT_FALSE(decoded->put);
}

TEST(FastPathWireTest, AHeldRequestSaysSoBesideItsWriteOrRead) {
  FastRequest request;
  request.held = true;
  request.read = true;
  absl::StatusOr<FastRequest> decoded = DecodeFastRequest(EncodeFastRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->held);
  EXPECT_TRUE(decoded->read);
  request.read = false;
  decoded = DecodeFastRequest(EncodeFastRequest(request));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_TRUE(decoded->held);
  EXPECT_FALSE(decoded->read);
}

TEST(FastPathWireTest, AReshapedNoticeCarriesTheValuesMetadata) {
  FastNotice reshaped(11, FastNoticeKind::kReshaped, 0, "");
  reshaped.dtype = 3;
  reshaped.num_dims = kFastPathMaxDims;
  for (int i = 0; i < kFastPathMaxDims; ++i) reshaped.dims[i] = i + 1;
  absl::StatusOr<FastNotice> decoded = DecodeFastNotice(EncodeFastNotice(reshaped));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->kind, FastNoticeKind::kReshaped);
  EXPECT_EQ(decoded->dtype, 3);
  EXPECT_EQ(decoded->num_dims, static_cast<uint32_t>(kFastPathMaxDims));
  EXPECT_EQ(decoded->dims[kFastPathMaxDims - 1], kFastPathMaxDims);
  reshaped.num_dims = kFastPathMaxDims + 1;
  EXPECT_TRUE(absl::StrContains(DecodeFastNotice(EncodeFastNotice(reshaped)).status().message(),
                                "dimensions"));
}

TEST(FastPathWireTest, ABatchOfRequestsArrivesAsSentInOrder) {
  std::vector<std::string> encoded;
  for (uint64_t id = 1; id <= 3; ++id) {
    FastRequest request;
    request.key_id = 0xabc;
    request.request_id = id;
    request.put = id == 2;
    request.put_key = id == 2 ? "key" : "";
    encoded.push_back(EncodeFastRequest(request));
  }
  const std::string batch = EncodeFastRequests(encoded);
  EXPECT_EQ(batch.size(), FastRequestsBytes(3, encoded[0].size() * 2 + encoded[1].size()));
  ASSERT_EQ(*PeekFastKind(batch), FastKind::kRequests);
  absl::StatusOr<std::vector<FastRequest>> decoded = DecodeFastRequests(batch);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  ASSERT_EQ(decoded->size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) EXPECT_EQ((*decoded)[i].request_id, i + 1);
  EXPECT_EQ((*decoded)[1].put_key, "key");
  EXPECT_FALSE(DecodeFastRequest(batch).ok()) << "a batch is not one request";
}

TEST(FastPathWireTest, ABatchIsRefusedWholeWhenAnyEntryIsWrong) {
  const std::string one = EncodeFastRequest(FastRequest{});
  EXPECT_TRUE(absl::StrContains(DecodeFastRequests(EncodeFastRequests({})).status().message(),
                                "at least one"));
  const std::vector<std::string> too_many(kMaxBatchedRequests + 1, one);
  EXPECT_TRUE(
      absl::StrContains(DecodeFastRequests(EncodeFastRequests(too_many)).status().message(),
                        "at most"));
  const std::string batch = EncodeFastRequests({one, one});
  EXPECT_TRUE(absl::StrContains(
      DecodeFastRequests(batch.substr(0, batch.size() - 1)).status().message(), "past its end"));
  EXPECT_TRUE(absl::StrContains(DecodeFastRequests(batch + "x").status().message(),
                                "after its last entry"));
  EXPECT_TRUE(absl::StrContains(
      DecodeFastRequests(EncodeFastRequests({one, EncodeFastWithdrawal({})})).status().message(),
      "entry 1"));
  EXPECT_TRUE(absl::StrContains(
      DecodeFastRequests(EncodeFastRequests({one, std::string(2, 'x')})).status().message(),
      "entry 1"));
}

TEST(FastPathWireTest, AWithdrawalArrivesAsSent) {
  const std::string bytes = EncodeFastWithdrawal({0xfeedull, 12, 34});
  ASSERT_EQ(*PeekFastKind(bytes), FastKind::kWithdraw);
  absl::StatusOr<FastWithdrawal> decoded = DecodeFastWithdrawal(bytes);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->key_id, 0xfeedull);
  EXPECT_EQ(decoded->step_id, 12);
  EXPECT_EQ(decoded->request_id, 34u);
  EXPECT_FALSE(DecodeFastRequest(bytes).ok()) << "a withdrawal is not a request";
  EXPECT_FALSE(DecodeFastWithdrawal(bytes.substr(0, bytes.size() - 1)).ok());
}

TEST(FastPathWireTest, ANoticeArrivesAsSentAndItsTextIsBounded) {
  FastNotice notice;
  notice.request_id = 9;
  notice.kind = FastNoticeKind::kFailed;
  notice.code = 10;
  notice.message = std::string(kMaxNoticeText + 50, 'x');
  absl::StatusOr<FastNotice> decoded = DecodeFastNotice(EncodeFastNotice(notice));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->request_id, 9u);
  EXPECT_EQ(decoded->kind, FastNoticeKind::kFailed);
  EXPECT_EQ(decoded->code, 10);
  EXPECT_EQ(decoded->message.size(), kMaxNoticeText);
}

TEST(FastPathWireTest, AnythingElseIsRefusedWithAReason) {
  FastRequest request;
  request.num_dims = 1;
  std::string bytes = EncodeFastRequest(request);
  EXPECT_TRUE(absl::StrContains(PeekFastKind("RDV").status().message(), "too short"));
  std::string unknown_kind = bytes;
  unknown_kind[6] = 6;
  EXPECT_TRUE(absl::StrContains(PeekFastKind(unknown_kind).status().message(), "unknown kind"));
  std::string wrong_magic = bytes;
  wrong_magic[0] = 'X';
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(wrong_magic).status().message(), "magic"));
  std::string wrong_version = bytes;
  wrong_version[4] = 9;
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(wrong_version).status().message(), "version"));
  const std::string cut = bytes.substr(0, bytes.size() - 1);
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(cut).status().message(), "bytes"));
  request.num_dims = kFastPathMaxDims + 1;
  EXPECT_TRUE(absl::StrContains(DecodeFastRequest(EncodeFastRequest(request)).status().message(),
                                "dimensions"));
  FastNotice notice;
  notice.kind = FastNoticeKind::kWithdrawn;
  EXPECT_EQ(DecodeFastNotice(EncodeFastNotice(notice))->kind, FastNoticeKind::kWithdrawn);
  notice.kind = FastNoticeKind::kLanded;
  EXPECT_EQ(DecodeFastNotice(EncodeFastNotice(notice))->kind, FastNoticeKind::kLanded);
  notice.kind = static_cast<FastNoticeKind>(42);
  EXPECT_FALSE(DecodeFastNotice(EncodeFastNotice(notice)).ok());
  notice.kind = FastNoticeKind::kFailed;
  notice.code = 0;  // not a failure's code
  EXPECT_EQ(DecodeFastNotice(EncodeFastNotice(notice))->code, 2);
  notice.kind = FastNoticeKind::kReadable;
  notice.remote_key = std::string(kMaxPutKeyBytes + 1, 'k');
  EXPECT_TRUE(absl::StrContains(DecodeFastNotice(EncodeFastNotice(notice)).status().message(),
                                "remote key"));
  std::string release = EncodeFastRelease({1, 2, 3, 4});
  release.pop_back();
  EXPECT_FALSE(DecodeFastRelease(release).ok());
}

TEST(FastPathWireTest, AReadableNoticeAndAReleaseSurviveTheWire) {
  FastNotice readable(9, FastNoticeKind::kReadable, 0, "");
  readable.transfer_id = 77;
  readable.address = 0x7f0000001000;
  readable.remote_key = "sealed key bytes";
  absl::StatusOr<FastNotice> notice = DecodeFastNotice(EncodeFastNotice(readable));
  ASSERT_TRUE(notice.ok()) << notice.status();
  EXPECT_EQ(notice->request_id, 9u);
  EXPECT_EQ(notice->kind, FastNoticeKind::kReadable);
  EXPECT_EQ(notice->transfer_id, 77u);
  EXPECT_EQ(notice->address, readable.address);
  EXPECT_EQ(notice->remote_key, readable.remote_key);
  absl::StatusOr<FastRelease> release = DecodeFastRelease(EncodeFastRelease({5, -6, 7, 8}));
  ASSERT_TRUE(release.ok()) << release.status();
  EXPECT_EQ(release->key_id, 5u);
  EXPECT_EQ(release->step_id, -6);
  EXPECT_EQ(release->transfer_id, 7u);
  EXPECT_EQ(release->bytes, 8u);
  EXPECT_EQ(PeekFastKind(EncodeFastRelease({})).value(), FastKind::kRelease);
}

}  // namespace
}  // namespace rdv::control
