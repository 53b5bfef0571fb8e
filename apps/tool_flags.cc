#include "apps/tool_flags.h"

#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "absl/strings/strip.h"

namespace rdv {

std::vector<char*> ParseToolFlags(int argc, char** argv, absl::string_view usage) {
  absl::FlagsUsageConfig config;
  // Abseil hands over file names without their leading '/'.
  config.contains_help_flags = [](absl::string_view file) {
    return absl::StartsWith(absl::StripPrefix(file, "/"),
                            absl::StripPrefix(RDV_SOURCE_DIR "/", "/"));
  };
  config.contains_helpshort_flags = config.contains_help_flags;
  absl::SetFlagsUsageConfig(config);
  absl::SetProgramUsageMessage(usage);
  return absl::ParseCommandLine(argc, argv);
}

}  // namespace rdv
