// The one reader of rdv's RDV_* settings from the environment: every
// variable parses and fails the same way ("NAME='text': expected ...",
// INVALID_ARGUMENT), and an unset or empty variable leaves the default.
// Each part fills its options struct once, through these
// (docs/configuration.md lists every variable).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "core/status.h"

namespace rdv::env {

// An integer in [min, max].
absl::Status ReadInt(const char* name, int64_t min, int64_t max, int64_t* value);
// A byte count up to `max`.
absl::Status ReadBytes(const char* name, uint64_t max, uint64_t* value);
// Milliseconds in [min, max], as a duration.
absl::Status ReadMilliseconds(const char* name, absl::Duration min, absl::Duration max,
                              absl::Duration* value);
// One of `choices`.
absl::Status ReadChoice(const char* name, std::initializer_list<absl::string_view> choices,
                        std::string* value);
// Any text (a path, an address).
void ReadText(const char* name, std::string* value);

}  // namespace rdv::env
