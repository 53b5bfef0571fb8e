#include "apps/compare_script.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace rdv {

int RunCompareScript(int argc, char** argv) {
  char self[4096];
  const ssize_t length = readlink("/proc/self/exe", self, sizeof(self) - 1);
  if (length <= 0) {
    std::fprintf(stderr, "rdv-bench: cannot find its own executable\n");
    return 1;
  }
  self[length] = '\0';
  const std::string installed =
      std::string(self).substr(0, std::string(self).rfind('/')) + "/../share/rdv/compare.py";
  const std::string script = access(installed.c_str(), R_OK) == 0 ? installed : RDV_COMPARE_SCRIPT;
  std::vector<char*> args = {const_cast<char*>("python3"), const_cast<char*>(script.c_str()),
                             const_cast<char*>("--rdv-bench"), self};
  for (int i = 2; i < argc; ++i) args.push_back(argv[i]);
  args.push_back(nullptr);
  execvp("python3", args.data());
  std::fprintf(stderr, "rdv-bench compare: cannot run python3 %s: %s\n", script.c_str(),
               std::strerror(errno));
  return 1;
}

}  // namespace rdv
