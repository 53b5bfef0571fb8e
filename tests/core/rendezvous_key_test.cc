#include "core/rendezvous_key.h"

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace rdv {
namespace {

constexpr char kExample[] =
    "/job:worker/replica:0/task:0/device:GPU:0;0000000000000001;"
    "/job:worker/replica:0/task:1/device:CPU:0;edge_5_foo;0:0";

TEST(RendezvousKeyTest, CreatesTensorFlowExampleByteForByte) {
  EXPECT_EQ(CreateRendezvousKey("/job:worker/replica:0/task:0/device:GPU:0", 1,
                                "/job:worker/replica:0/task:1/device:CPU:0", "edge_5_foo",
                                FrameAndIter{0, 0}),
            kExample);
  EXPECT_EQ(CreateRendezvousKey("/job:a/replica:0/task:0/device:CPU:0", 0xDEADBEEFCAFEULL,
                                "/job:a/replica:0/task:0/device:CPU:1", "x", FrameAndIter{3, 7}),
            "/job:a/replica:0/task:0/device:CPU:0;0000deadbeefcafe;"
            "/job:a/replica:0/task:0/device:CPU:1;x;3:7");
}

TEST(RendezvousKeyTest, ParsesTheExample) {
  auto key = ParsedKey::Parse(kExample);
  ASSERT_TRUE(key.ok()) << key.status();
  EXPECT_EQ(key->FullKey(), kExample);
  EXPECT_EQ(key->src_device(), "/job:worker/replica:0/task:0/device:GPU:0");
  EXPECT_EQ(key->src_incarnation(), 1u);
  EXPECT_EQ(key->dst_device(), "/job:worker/replica:0/task:1/device:CPU:0");
  EXPECT_EQ(key->tensor_name(), "edge_5_foo");
  EXPECT_EQ(key->frame_iter(), "0:0");
  EXPECT_EQ(key->edge_name(), "edge_5_foo");  // TensorFlow's: the name part only
  EXPECT_EQ(key->src().task, 0);
  EXPECT_EQ(key->dst().task, 1);
  EXPECT_TRUE(key->src().IsGpu());
}

TEST(RendezvousKeyTest, ViewsPointIntoItsOwnString) {
  std::string text = kExample;
  auto key = ParsedKey::Parse(text);
  ASSERT_TRUE(key.ok());
  text.assign(text.size(), 'z');  // the caller's string may change or die
  ParsedKey copy = *key;
  key = ParsedKey();
  EXPECT_EQ(copy.tensor_name(), "edge_5_foo");
  EXPECT_GE(copy.tensor_name().data(), copy.FullKey().data());
  EXPECT_LE(copy.tensor_name().data() + copy.tensor_name().size(),
            copy.FullKey().data() + copy.FullKey().size());
}

TEST(RendezvousKeyTest, RoundTripsManyKeys) {
  for (uint64_t incarnation : {0ULL, 1ULL, 0xFFFFFFFFFFFFFFFFULL, 0x0123456789ABCDEFULL}) {
    for (int64_t iter : {0, 1, 12345}) {
      const std::string text =
          CreateRendezvousKey("/job:w/replica:1/task:2/device:GPU:3", incarnation,
                              "/job:ps/replica:0/task:0/device:CPU:0", "t:1", {iter, iter + 1});
      auto key = ParsedKey::Parse(text);
      ASSERT_TRUE(key.ok()) << key.status();
      EXPECT_EQ(key->src_incarnation(), incarnation);
      EXPECT_EQ(CreateRendezvousKey(key->src_device(), key->src_incarnation(), key->dst_device(),
                                    key->tensor_name(), {iter, iter + 1}),
                text);
    }
  }
}

TEST(RendezvousKeyTest, RejectsMalformedKeys) {
  const std::string d = "/job:w/replica:0/task:0/device:CPU:0";
  const std::string cases[] = {
      "",
      d,
      d + ";0000000000000001;" + d + ";name",                    // four parts
      d + ";0000000000000001;" + d + ";name;0:0;extra",          // six parts
      "/job:w/task:0/cpu:0;0000000000000001;" + d + ";n;0:0",     // source not fully named
      d + ";0000000000000001;/gpu:0;n;0:0",                       // destination not fully named
      "job:w;0000000000000001;" + d + ";n;0:0",                   // bad device
      d + ";00000000000000g1;" + d + ";n;0:0",                    // non-hex incarnation
      d + ";;" + d + ";n;0:0",                                    // empty incarnation
      d + ";00000000000000001;" + d + ";n;0:0",                   // 17 hex digits
      d + ";0000000000000001;" + d + ";;0:0",                     // empty name
      d + ";0000000000000001;" + d + ";n;",                       // empty frame:iter
  };
  for (const std::string& bad : cases) {
    auto key = ParsedKey::Parse(bad);
    EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument) << bad;
    EXPECT_NE(key.status().message().find("Invalid rendezvous key '" + bad + "'"),
              absl::string_view::npos)
        << key.status();
  }
}

// A peer may send any bytes as a key: a long one is refused by its length,
// and the error quotes a bounded, printable excerpt of it.
TEST(RendezvousKeyTest, RejectsOverlongKeysWithABoundedExcerpt) {
  const std::string d = "/job:w/replica:0/task:0/device:CPU:0";
  const std::string prefix = d + ";0000000000000001;" + d + ";";
  const std::string at_limit = prefix + std::string(kMaxKeyBytes - prefix.size() - 4, 'n') + ";0:0";
  ASSERT_EQ(at_limit.size(), kMaxKeyBytes);
  EXPECT_TRUE(ParsedKey::Parse(at_limit).ok());
  std::string huge = prefix + std::string(1 << 20, '\xff') + ";0:0";
  auto key = ParsedKey::Parse(huge);
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(key.status().message().size(), 2000u) << "the error must not echo the whole key";
  EXPECT_NE(key.status().message().find(absl::StrCat(huge.size(), " bytes")),
            absl::string_view::npos)
      << key.status();
  EXPECT_EQ(key.status().message().find('\xff'), absl::string_view::npos)
      << "binary bytes are escaped";
  // Found by fuzz/rendezvous_key_fuzzer: a device name of thousands of
  // bytes was echoed whole inside the key's error.
  const std::string long_device = "/job:" + std::string(3000, 'j');
  key = ParsedKey::Parse(long_device + ";0000000000000001;" + d + ";n;0:0");
  EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_LT(key.status().message().size(), 1024u) << key.status();
}

}  // namespace
}  // namespace rdv
