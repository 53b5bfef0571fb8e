// The UCX plugin's settings, as a loaded plugin applies them: which
// transports get rdv's segment defaults, get versus tag by its tls, the
// values it refuses, and where a setting comes from. UCX's own segment
// variables are UCX's, read from the environment by UCX itself.
#include <cstdlib>
#include <optional>
#include <string>

#include "absl/strings/match.h"
#include "core/logging.h"
#include "gtest/gtest.h"
#include "plugin/transport.h"
#include "tests/test_util.h"

namespace rdv::plugin {
namespace {

using testing::ScopedVariable;

// rdv's UCX segment defaults apply only where UCX may open a transport that
// reads them and the user has not chosen: UCX warns of a setting no
// interface takes.
TEST(UcxTransportTest, TunesSegmentsOnlyWhereTheirTransportIsAllowedAndUnset) {
  const struct {
    const char* tls;
    const char* user_variable;  // set to a value of the user's, or null
    bool tcp_tuned;
    bool mm_tuned;
    bool rndv_tuned;  // UCP's own setting: only where tcp is all there is
  } cases[] = {
      // Every transport: tcp between processes where UCX finds no RDMA
      // device (rdv asks for peer-failure handling, which keeps it off
      // shared memory); RDMA where it finds one.
      {"all", nullptr, true, true, !testing::HaveRdmaDevice()},
      {"tcp", nullptr, true, false, true},
      {"tcp,self", nullptr, true, false, true},
      {"tcp,posix", nullptr, true, true, false},
      {"posix,cma,self", nullptr, false, true, false},
      {"sm,self", nullptr, false, true, false},
      {"^tcp", nullptr, false, true, false},
      {"^sm", nullptr, true, false, false},
      {"^posix", nullptr, true, true, false},
      {"tcp", "UCX_TCP_RX_SEG_SIZE", false, false, true},
      {"tcp", "UCX_RNDV_THRESH", true, false, false},
      {"posix,cma,self", "UCX_SYSV_SEG_SIZE", false, false, false},
  };
  for (const auto& c : cases) {
    ScopedVariable tcp("UCX_TCP_RX_SEG_SIZE", nullptr);
    ScopedVariable sysv("UCX_SYSV_SEG_SIZE", nullptr);
    ScopedVariable rndv("UCX_RNDV_THRESH", nullptr);
    std::optional<ScopedVariable> user;
    if (c.user_variable != nullptr) user.emplace(c.user_variable, "16K");
    auto transport = Transport::Load("ucx", {{"tls", c.tls}});
    ASSERT_TRUE(transport.ok()) << transport.status();
    const std::string description = (*transport)->description();
    EXPECT_EQ(description.find("UCX_TCP_RX_SEG_SIZE=1M") != std::string::npos, c.tcp_tuned)
        << "UCX_TLS=" << c.tls << ": " << description;
    EXPECT_EQ(description.find("UCX_{POSIX,SYSV}_SEG_SIZE=56K") != std::string::npos, c.mm_tuned)
        << "UCX_TLS=" << c.tls << ": " << description;
    EXPECT_EQ(description.find("UCX_RNDV_THRESH=1M") != std::string::npos, c.rndv_tuned)
        << "UCX_TLS=" << c.tls << ": " << description;
  }
}

// UCX_TLS unset is every transport, as "all" above.
TEST(UcxTransportTest, TunesTheRendezvousWithTlsUnsetOnlyWhereTcpCarriesEverything) {
  ScopedVariable tls("UCX_TLS", nullptr);
  ScopedVariable rndv("UCX_RNDV_THRESH", nullptr);
  auto transport = Transport::Load("ucx");
  ASSERT_TRUE(transport.ok()) << transport.status();
  const std::string description = (*transport)->description();
  EXPECT_EQ(description.find("UCX_RNDV_THRESH=1M") != std::string::npos,
            !testing::HaveRdmaDevice())
      << description;
}

// Tagged messages only where UCX_TLS leaves tcp alone between processes;
// one-sided gets wherever shared memory or RDMA may be used.
// A get only where the NIC bounds it to the descriptor's tensor (RC, DC);
// anywhere UCX could serve it in software, the producer sends instead.
TEST(UcxTransportTest, GetsOnlyWhereTheNicConfinesTheRead) {
  const struct {
    const char* tls;
    bool tagged;
  } cases[] = {{"tcp", true},          {"tcp,self", true},          {"^tcp", true},
               {"sm,tcp", true},       {"rc_verbs,tcp", true},      {"posix,cma,self", true},
               {"ud_verbs", true},     {"rc_verbs,ud_verbs", false}, {"rc_verbs,self", false},
               {"dc_mlx5", false},     {"ib", false}};
  {
    auto transport = Transport::Load("ucx", {{"op", "auto"}, {"tls", "all"}});
    ASSERT_TRUE(transport.ok()) << transport.status();
    EXPECT_EQ((*transport)->preferred_op(), RDV_TRANSPORT_OP_TAG) << "every transport";
  }
  const bool require_rdma = std::getenv("RDV_TEST_REQUIRE_RDMA") != nullptr;
  for (const auto& c : cases) {
    auto transport = Transport::Load("ucx", {{"op", "auto"}, {"tls", c.tls}});
    // RDMA-only settings load where a device is (tests/softroce).
    if (!transport.ok() && !require_rdma &&
        absl::StrContains(transport.status().message(), "No such device")) {
      continue;
    }
    ASSERT_TRUE(transport.ok()) << c.tls << ": " << transport.status();
    EXPECT_EQ((*transport)->preferred_op() == RDV_TRANSPORT_OP_TAG, c.tagged)
        << "UCX_TLS=" << c.tls << ": " << (*transport)->description();
  }
}

TEST(UcxTransportTest, RefusesAnUnknownOpNamingTheSettingAndItsVariable) {
  auto transport = Transport::Load("ucx", {{"op", "put"}});
  ASSERT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(transport.status().message(),
                                "op (RDV_UCX_OP)='put': expected one of 'auto', 'get', 'tag'"))
      << transport.status();
}

// A setting the caller gives wins over its variable; one it leaves out is
// read from the variable the plugin names.
TEST(UcxTransportTest, AGivenSettingWinsOverItsVariable) {
  ScopedVariable op("RDV_UCX_OP", "get");
  auto from_variable = Transport::Load("ucx", {{"tls", "tcp"}});
  ASSERT_TRUE(from_variable.ok()) << from_variable.status();
  EXPECT_EQ((*from_variable)->preferred_op(), RDV_TRANSPORT_OP_GET);
  auto given = Transport::Load("ucx", {{"tls", "tcp"}, {"op", "tag"}});
  ASSERT_TRUE(given.ok()) << given.status();
  EXPECT_EQ((*given)->preferred_op(), RDV_TRANSPORT_OP_TAG);
}

// Gets over shared memory of anonymous memory go through the producer's
// progress thread, which UCX 1.13 cannot give up on when the producer is
// lost: the plugin says so when it starts, and not with memory mapped (the
// default there).
TEST(UcxTransportTest, WarnsOfGetsOverSharedMemoryOfAnonymousMemory) {
  const struct {
    TransportSettings settings;
    bool warned;
  } cases[] = {
      {{{"tls", "posix,cma,self"}, {"op", "get"}, {"memory", "anonymous"}}, true},
      {{{"tls", "posix,cma,self"}, {"op", "get"}}, false},
      {{{"tls", "posix,cma,self"}, {"op", "get"}, {"memory", "mapped"}}, false},
      {{{"tls", "posix,cma,self"}, {"op", "tag"}}, false},
      {{{"tls", "tcp"}, {"op", "get"}}, false},
  };
  const LogLevel level = CurrentLogLevel();
  SetLogLevel(LogLevel::kWarning);  // whatever RDV_LOG_LEVEL says
  for (const auto& c : cases) {
    ::testing::internal::CaptureStderr();
    auto transport = Transport::Load("ucx", c.settings);
    const std::string logged = ::testing::internal::GetCapturedStderr();
    ASSERT_TRUE(transport.ok()) << transport.status();
    EXPECT_EQ(logged.find("a producer lost mid-get can leave later gets") != std::string::npos,
              c.warned)
        << c.settings.at("tls") << " op " << c.settings.at("op") << ": " << logged;
  }
  SetLogLevel(level);
}

// UCX would hang at the first transfer of a 64 KiB segment or more.
TEST(UcxTransportTest, RefusesSharedMemorySegmentsThatHangUcx) {
  const TransportSettings shared_memory = {{"tls", "posix,cma,self"}};
  for (const char* name : {"UCX_POSIX_SEG_SIZE", "UCX_SYSV_SEG_SIZE", "UCX_MM_SEG_SIZE"}) {
    ScopedVariable segment(name, "64K");
    auto transport = Transport::Load("ucx", shared_memory);
    ASSERT_EQ(transport.status().code(), absl::StatusCode::kInvalidArgument) << name;
    const std::string message(transport.status().message());
    EXPECT_NE(message.find(std::string(name) + "=64K"), std::string::npos) << message;
    EXPECT_NE(message.find("at most 60000"), std::string::npos) << message;
  }
  ScopedVariable accepted("UCX_POSIX_SEG_SIZE", "60000");
  EXPECT_TRUE(Transport::Load("ucx", shared_memory).ok());
}

}  // namespace
}  // namespace rdv::plugin
