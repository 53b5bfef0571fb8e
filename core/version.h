// The version of librdv.so (project(rdv VERSION ...)), for an embedder and
// `rdv.__version__`. Defined in the shared library only.
#pragma once

#include "absl/strings/string_view.h"

namespace rdv {

absl::string_view Version();

}  // namespace rdv
