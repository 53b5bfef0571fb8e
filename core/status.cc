#include "core/status.h"

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace rdv {

std::string Excerpt(absl::string_view text, size_t max_bytes) {
  std::string out;
  size_t quoted = 0;
  for (; quoted < text.size(); ++quoted) {
    const std::string escaped = absl::CHexEscape(text.substr(quoted, 1));
    if (out.size() + escaped.size() > max_bytes) break;
    out += escaped;
  }
  if (quoted < text.size()) absl::StrAppend(&out, "...(", text.size(), " bytes)");
  return out;
}

}  // namespace rdv
