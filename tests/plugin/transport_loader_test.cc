// The loader against real and deliberately broken plugins: versions,
// tables, settings, and where UCX's own log lines go.
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "gtest/gtest.h"
#include "plugin/transport.h"
#include "tests/plugin/transport_conformance.h"

namespace rdv::plugin::conformance {
namespace {

class TransportLoaderTest : public ::testing::Test {
 protected:
  void SetUp() override { setenv("RDV_PLUGIN_PATH", RDV_BROKEN_PLUGIN_DIR, 1); }
  void TearDown() override { unsetenv("RDV_PLUGIN_PATH"); }
};

TEST_F(TransportLoaderTest, WrongAbiVersionIsRefusedClearly) {
  auto transport = Transport::Load("wrongabi");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_wrongabi.so"), std::string::npos) << message;
  EXPECT_NE(message.find("rdv_transport_v2 reports ABI version 99"), std::string::npos)
      << message;
  EXPECT_NE(message.find("rdv takes transport ABI 3 (rdv_transport_v3) and 2"),
            std::string::npos)
      << message;
}

TEST_F(TransportLoaderTest, MissingEntryPointIsRefusedClearly) {
  auto transport = Transport::Load("nosymbol");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_nosymbol.so"), std::string::npos) << message;
  EXPECT_NE(message.find("no symbol rdv_transport_v3 or rdv_transport_v2"), std::string::npos)
      << message;
}

// A v3 plugin built before mem_query was appended to v3 loads (its init
// runs); a table shorter than v3 first was is refused.
TEST_F(TransportLoaderTest, AV3TableEndingBeforeItsAppendedFunctionsLoads) {
  auto base = Transport::Load("basev3");
  ASSERT_FALSE(base.ok());
  EXPECT_TRUE(absl::StrContains(base.status().message(), "init reached")) << base.status();
  auto short_table = Transport::Load("shortv3");
  ASSERT_EQ(short_table.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(short_table.status().message(), "rdv_transport_v3 reports ABI "
                                                                "version 3"))
      << short_table.status();
}

// mem_query: UCX's peers read its memory by a copy of their own only where
// it is a mapped segment (256 KiB and more) and every peer is on this host;
// the attribute peer_copy_from_bytes says so before anything is allocated.
TEST(TransportAbiTest, UcxMemoryIsReadByPeerCopyOnlyInSegmentsOfOneHost) {
  struct Case {
    TransportSettings settings;
    bool large_read_by_copy;
  };
  const Case cases[] = {
      {{{"tls", "posix,cma,self"}}, true},
      {{{"tls", "posix,cma,self"}, {"memory", "mapped"}}, true},
      {{{"tls", "posix,cma,self"}, {"memory", "anonymous"}}, false},
      {{{"tls", "tcp"}}, false},
      {{{"tls", "tcp"}, {"memory", "mapped"}}, false},
  };
  for (const Case& c : cases) {
    auto transport = Transport::Load("ucx", c.settings);
    ASSERT_TRUE(transport.ok()) << transport.status();
    auto large = (*transport)->Allocate(size_t{1} << 20);
    auto small = (*transport)->Allocate(size_t{64} << 10);
    ASSERT_TRUE(large.ok() && small.ok());
    std::vector<char> own(size_t{1} << 20);
    auto registered = (*transport)->Register(own.data(), own.size());
    ASSERT_TRUE(registered.ok()) << registered.status();
    const std::string where = (*transport)->description();
    EXPECT_EQ((*transport)->peer_copy_from_bytes(), c.large_read_by_copy ? size_t{256} << 10 : 0)
        << where;
    EXPECT_EQ((*large)->read_by_peer_copy(), c.large_read_by_copy) << where;
    EXPECT_FALSE((*small)->read_by_peer_copy()) << where;
    EXPECT_FALSE((*registered)->read_by_peer_copy()) << where;
  }
}

// UCX's own lines go through rdv's logger, in its format and under its
// level, not printed by UCX: an unknown UCX_* variable makes UCX warn at its
// first init in a process (ctest runs each case in a process of its own).
std::string StderrOfALoadWithAnUnknownUcxVariable() {
  setenv("UCX_RDV_TEST_NO_SUCH_SETTING", "1", 1);
  ::testing::internal::CaptureStderr();
  auto transport = Transport::Load("ucx", {{"tls", "tcp"}});
  std::string printed = ::testing::internal::GetCapturedStderr();
  unsetenv("UCX_RDV_TEST_NO_SUCH_SETTING");
  EXPECT_TRUE(transport.ok()) << transport.status();
  return printed;
}

TEST(TransportAbiTest, UcxOwnWarningsGoThroughRdvsLogger) {
  const std::string printed = StderrOfALoadWithAnUnknownUcxVariable();
  EXPECT_TRUE(absl::StrContains(printed, "rdv warning")) << printed;
  EXPECT_TRUE(absl::StrContains(printed, "UCX parser.c")) << printed;
  EXPECT_TRUE(absl::StrContains(printed, "UCX_RDV_TEST_NO_SUCH_SETTING")) << printed;
  EXPECT_FALSE(absl::StrContains(printed, "UCX  WARN")) << "UCX printed it itself: " << printed;
}

TEST(TransportAbiTest, UcxOwnWarningsFollowRdvsLogLevel) {
  const LogLevel before = CurrentLogLevel();
  SetLogLevel(LogLevel::kError);
  const std::string printed = StderrOfALoadWithAnUnknownUcxVariable();
  SetLogLevel(before);
  EXPECT_FALSE(absl::StrContains(printed, "UCX_RDV_TEST_NO_SUCH_SETTING")) << printed;
}

// A plugin built against the frozen v2 ABI (the UCX plugin, built so) still
// loads, takes no settings, and says which version it speaks; the
// conformance suite below runs on it as well.
TEST(TransportAbiTest, AV2PluginLoadsWithoutSettings) {
  auto transport = Transport::Load("ucx_abi_v2");
  ASSERT_TRUE(transport.ok()) << transport.status();
  EXPECT_EQ((*transport)->abi_version(), 2u);
  EXPECT_TRUE((*transport)->settings().empty());
  EXPECT_EQ((*transport)->peer_copy_from_bytes(), 0u);  // v2 has no memory read by copy
  auto refused = Transport::Load("ucx_abi_v2", {{"tls", "tcp"}});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(refused.status().message(), "ABI v2, which takes no settings"))
      << refused.status();
}

TEST(TransportAbiTest, AV3PluginListsItsSettingsAndRefusesOthers) {
  auto transport = Transport::Load("ucx", {{"op", "tag"}});
  ASSERT_TRUE(transport.ok()) << transport.status();
  EXPECT_EQ((*transport)->abi_version(), 3u);
  std::vector<std::string> names;
  for (const TransportSetting& setting : (*transport)->settings()) {
    names.push_back(setting.name);
    if (setting.name == "op") {
      EXPECT_EQ(setting.value, "tag");
      EXPECT_EQ(setting.environment, "RDV_UCX_OP");
      EXPECT_EQ(setting.default_value, "auto");
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{"tls", "op", "progress", "spin_us", "memory"}));
  auto refused = Transport::Load("ucx", {{"colour", "blue"}});
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(refused.status().message(),
                                "no setting 'colour'; it takes: tls, op, progress"))
      << refused.status();
}

// A value out of range is refused by name, before any device is looked for.
TEST(TransportAbiTest, VerbsRefusesASettingOutOfRangeNamingIt) {
  if (absl::IsNotFound(Transport::ListSettings("verbs").status())) {
    GTEST_SKIP() << "the verbs plugin is not built here";
  }
  auto transport = Transport::Load("verbs", {{"qp_timeout", "99"}});
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument) << transport.status();
  EXPECT_TRUE(absl::StrContains(transport.status().message(),
                                "qp_timeout (RDV_IB_QP_TIMEOUT)='99': expected an integer in "
                                "[1, 31]"))
      << transport.status();
}

// Every variable a plugin reads a setting from is in docs/configuration.md.
TEST(TransportAbiTest, EverySettingsVariableIsDocumented) {
  std::ifstream file(std::string(RDV_SOURCE_DIR) + "/docs/configuration.md");
  const std::string docs((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(docs.empty());
  for (const char* name : {"ucx", "verbs"}) {
    auto settings = Transport::ListSettings(name);
    if (absl::IsNotFound(settings.status())) continue;  // not built here
    ASSERT_TRUE(settings.ok()) << settings.status();
    EXPECT_FALSE(settings->empty()) << name;
    for (const TransportSetting& setting : *settings) {
      EXPECT_TRUE(absl::StrContains(docs, absl::StrCat("`", setting.environment, "`")))
          << name << "'s setting " << setting.name << " (" << setting.environment
          << ") is missing from docs/configuration.md";
    }
  }
}

TEST_F(TransportLoaderTest, UnknownTransportSaysWhereItLooked) {
  auto transport = Transport::Load("carrierpigeon");
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kNotFound);
  const std::string message(transport.status().message());
  EXPECT_NE(message.find("librdv_transport_carrierpigeon.so"), std::string::npos);
  EXPECT_NE(message.find(RDV_BROKEN_PLUGIN_DIR), std::string::npos) << message;
}

}  // namespace
}  // namespace rdv::plugin::conformance
