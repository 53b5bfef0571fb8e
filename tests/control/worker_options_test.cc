#include <cstdlib>

#include "control/worker_server.h"
#include "gtest/gtest.h"

namespace rdv::control {
namespace {

// The worker's whole configuration comes from the environment through one
// call, so that a program embedding the worker honours the same variables
// as rdv-worker.
TEST(WorkerOptionsTest, FromEnvironmentFillsControlAndDataPlaneOptions) {
  setenv("RDV_PEER_TIMEOUT_MS", "1234", 1);
  setenv("RDV_INLINE_BYTES", "99", 1);
  absl::StatusOr<WorkerServerOptions> options = WorkerServerOptions::FromEnvironment();
  unsetenv("RDV_PEER_TIMEOUT_MS");
  unsetenv("RDV_INLINE_BYTES");
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->control.peer_timeout, absl::Milliseconds(1234));
  EXPECT_EQ(options->data_plane.inline_bytes, 99u);
  EXPECT_TRUE(options->control.fast_path) << "the fast path is on by default";
}

// An embedder's defaults hold where the environment is silent, and yield
// where it speaks.
TEST(WorkerOptionsTest, TheEnvironmentOverridesTheCallersDefaults) {
  WorkerServerOptions defaults;
  defaults.control.fast_path = false;
  defaults.data_plane.inline_bytes = 77;
  unsetenv("RDV_FAST_PATH");
  absl::StatusOr<WorkerServerOptions> kept = WorkerServerOptions::FromEnvironment(defaults);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_FALSE(kept->control.fast_path);
  EXPECT_EQ(kept->data_plane.inline_bytes, 77u);
  setenv("RDV_FAST_PATH", "1", 1);
  setenv("RDV_INLINE_BYTES", "99", 1);
  absl::StatusOr<WorkerServerOptions> overridden = WorkerServerOptions::FromEnvironment(defaults);
  unsetenv("RDV_FAST_PATH");
  unsetenv("RDV_INLINE_BYTES");
  ASSERT_TRUE(overridden.ok()) << overridden.status();
  EXPECT_TRUE(overridden->control.fast_path);
  EXPECT_EQ(overridden->data_plane.inline_bytes, 99u);
}

TEST(WorkerOptionsTest, ABadVariableIsRefusedByName) {
  setenv("RDV_POOL_CACHE_BYTES", "lots", 1);
  absl::StatusOr<WorkerServerOptions> options = WorkerServerOptions::FromEnvironment();
  unsetenv("RDV_POOL_CACHE_BYTES");
  EXPECT_EQ(options.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(options.status().message().find("RDV_POOL_CACHE_BYTES='lots'"), std::string::npos)
      << options.status();
}

TEST(WorkerOptionsTest, DefaultConstructedOptionsReadNoEnvironment) {
  setenv("RDV_PEER_TIMEOUT_MS", "1234", 1);
  const WorkerServerOptions options;
  unsetenv("RDV_PEER_TIMEOUT_MS");
  EXPECT_EQ(options.control.peer_timeout, ControlOptions().peer_timeout);
}

}  // namespace
}  // namespace rdv::control
