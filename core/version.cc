#include "core/version.h"

namespace rdv {

absl::string_view Version() { return RDV_VERSION; }

}  // namespace rdv
