// The UCX plugin's route for UCX's own log lines (ucx/ucx_log.h), called
// as UCX calls a log handler.
#include "ucx/ucx_log.h"

#include <cstdarg>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"

namespace rdv::ucx_plugin {
namespace {

struct Logged {
  std::vector<std::pair<int, std::string>> lines;
};

void Capture(void* user, int level, const char* message) {
  static_cast<Logged*>(user)->lines.emplace_back(level, message);
}

plugin_support::PluginLog LogInto(Logged* logged) {
  rdv_transport_init_params_t params{};
  params.field_mask = RDV_TRANSPORT_INIT_FIELD_LOG | RDV_TRANSPORT_INIT_FIELD_LOG_LEVEL;
  params.log = Capture;
  params.log_user = logged;
  params.log_level = 4;
  plugin_support::PluginLog log;
  log.Configure(&params);
  return log;
}

ucs_log_func_rc_t Log(ucs_log_level_t level, const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  const ucs_log_func_rc_t rc =
      RouteToHostLog("/src/ucp/tag/tag_match.c", 62, "ucp_tag_exp_remove", level, nullptr,
                     format, arguments);
  va_end(arguments);
  return rc;
}

TEST(UcxLogRouteTest, WithoutALiveContextUcxPrintsItself) {
  EXPECT_EQ(Log(UCS_LOG_LEVEL_WARN, "unmatched %d", 1), UCS_LOG_FUNC_RC_CONTINUE);
}

TEST(UcxLogRouteTest, LinesGoToTheHostLogAtUcxsLevel) {
  Logged logged;
  const plugin_support::PluginLog log = LogInto(&logged);
  const LogRoute route(&log);
  EXPECT_EQ(Log(UCS_LOG_LEVEL_ERROR, "failed %s", "badly"), UCS_LOG_FUNC_RC_STOP);
  EXPECT_EQ(Log(UCS_LOG_LEVEL_WARN, "unmatched %d", 7), UCS_LOG_FUNC_RC_STOP);
  EXPECT_EQ(Log(UCS_LOG_LEVEL_DEBUG, "detail"), UCS_LOG_FUNC_RC_STOP);
  const std::vector<std::pair<int, std::string>> expected = {
      {0, "UCX tag_match.c:62: failed badly"},
      {1, "UCX tag_match.c:62: unmatched 7"},
      {3, "UCX tag_match.c:62: detail"}};
  EXPECT_EQ(logged.lines, expected);
}

TEST(UcxLogRouteTest, FatalLinesStayUcxs) {
  Logged logged;
  const plugin_support::PluginLog log = LogInto(&logged);
  const LogRoute route(&log);
  EXPECT_EQ(Log(UCS_LOG_LEVEL_FATAL, "assertion failed"), UCS_LOG_FUNC_RC_CONTINUE);
  EXPECT_TRUE(logged.lines.empty());
}

ucs_log_func_rc_t LogFromCma(ucs_log_level_t level, const char* format, ...) {
  va_list arguments;
  va_start(arguments, format);
  const ucs_log_func_rc_t rc = RouteToHostLog("/src/uct/sm/scopy/cma/cma_ep.c", 105,
                                              "uct_cma_ep_tx_error", level, nullptr, format,
                                              arguments);
  va_end(arguments);
  return rc;
}

// UCX 1.13 aborts after a failed cma copy on an endpoint without
// peer-failure handling; the handler keeps the process (the transfer fails
// instead), with or without a live context to log through.
TEST(UcxLogRouteTest, AFatalCmaFailureIsAWarningAndNotAnAbort) {
  EXPECT_EQ(LogFromCma(UCS_LOG_LEVEL_FATAL, "process_vm_readv failed: %s", "No such process"),
            UCS_LOG_FUNC_RC_STOP);
  Logged logged;
  const plugin_support::PluginLog log = LogInto(&logged);
  const LogRoute route(&log);
  EXPECT_EQ(LogFromCma(UCS_LOG_LEVEL_FATAL, "process_vm_readv failed: %s", "No such process"),
            UCS_LOG_FUNC_RC_STOP);
  EXPECT_EQ(LogFromCma(UCS_LOG_LEVEL_WARN, "slow"), UCS_LOG_FUNC_RC_STOP);
  const std::vector<std::pair<int, std::string>> expected = {
      {1, "UCX cma: process_vm_readv failed: No such process (fatal to UCX 1.13; rdv fails this "
          "transfer instead)"},
      {1, "UCX cma_ep.c:105: slow"}};
  EXPECT_EQ(logged.lines, expected);
}

TEST(UcxLogRouteTest, WarningsWhileAWorkerIsTornDownAreInfo) {
  Logged logged;
  const plugin_support::PluginLog log = LogInto(&logged);
  const LogRoute route(&log);
  {
    const WorkerTeardown teardown;
    Log(UCS_LOG_LEVEL_WARN, "unmatched %d", 1);
    Log(UCS_LOG_LEVEL_ERROR, "failed");
  }
  Log(UCS_LOG_LEVEL_WARN, "unmatched %d", 2);
  ASSERT_EQ(logged.lines.size(), 3u);
  EXPECT_EQ(logged.lines[0].first, 2);
  EXPECT_EQ(logged.lines[1].first, 2);
  EXPECT_EQ(logged.lines[2].first, 1) << "the teardown's scope ended";
}

TEST(UcxLogRouteTest, TheNewestLiveContextsLogServes) {
  Logged first_lines, second_lines;
  const plugin_support::PluginLog first = LogInto(&first_lines);
  const plugin_support::PluginLog second = LogInto(&second_lines);
  const LogRoute first_route(&first);
  {
    const LogRoute second_route(&second);
    Log(UCS_LOG_LEVEL_WARN, "to the second");
  }
  Log(UCS_LOG_LEVEL_WARN, "to the first");
  ASSERT_EQ(second_lines.lines.size(), 1u);
  ASSERT_EQ(first_lines.lines.size(), 1u);
  EXPECT_EQ(first_lines.lines[0].second, "UCX tag_match.c:62: to the first");
}

}  // namespace
}  // namespace rdv::ucx_plugin
