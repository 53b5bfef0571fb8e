// The command line of rdv's tools (rdv-worker, rdv-launcher, rdv-run,
// rdv-bench and the bench/ programs).
#pragma once

#include <vector>

#include "absl/strings/string_view.h"

namespace rdv {

// Parses argv into the tools' flags (absl::ParseCommandLine), after making
// --help list every flag defined in rdv's sources, with its default and
// meaning, under `usage`. (Abseil lists only the flags of a file named like
// the program, and no rdv-worker.cc exists: it printed "No flags matched".)
// Returns the program name and the arguments that are not flags.
std::vector<char*> ParseToolFlags(int argc, char** argv, absl::string_view usage);

}  // namespace rdv
