#include "core/environment.h"

#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace rdv::env {
namespace {

// The variable's text, or null when it is unset or empty.
const char* Lookup(const char* name) {
  const char* text = std::getenv(name);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

absl::Status Expected(const char* name, const char* text, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrCat(name, "='", Excerpt(text, 64), "': expected ", what));
}

}  // namespace

absl::Status ReadInt(const char* name, int64_t min, int64_t max, int64_t* value) {
  const char* text = Lookup(name);
  if (text == nullptr) return absl::OkStatus();
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(text, &parsed) || parsed < min || parsed > max) {
    return Expected(name, text, absl::StrCat("an integer from ", min, " to ", max));
  }
  *value = parsed;
  return absl::OkStatus();
}

absl::Status ReadBytes(const char* name, uint64_t max, uint64_t* value) {
  const char* text = Lookup(name);
  if (text == nullptr) return absl::OkStatus();
  uint64_t parsed = 0;
  if (!absl::SimpleAtoi(text, &parsed) || parsed > max) {
    return Expected(name, text, absl::StrCat("a byte count up to ", max));
  }
  *value = parsed;
  return absl::OkStatus();
}

absl::Status ReadMilliseconds(const char* name, absl::Duration min, absl::Duration max,
                              absl::Duration* value) {
  int64_t ms = absl::ToInt64Milliseconds(*value);
  RDV_RETURN_IF_ERROR(
      ReadInt(name, absl::ToInt64Milliseconds(min), absl::ToInt64Milliseconds(max), &ms));
  *value = absl::Milliseconds(ms);
  return absl::OkStatus();
}

absl::Status ReadChoice(const char* name, std::initializer_list<absl::string_view> choices,
                        std::string* value) {
  const char* text = Lookup(name);
  if (text == nullptr) return absl::OkStatus();
  for (const absl::string_view choice : choices) {
    if (choice == text) {
      *value = text;
      return absl::OkStatus();
    }
  }
  return Expected(name, text, absl::StrCat("one of ", absl::StrJoin(choices, ", ")));
}

void ReadText(const char* name, std::string* value) {
  if (const char* text = Lookup(name)) *value = text;
}

}  // namespace rdv::env
