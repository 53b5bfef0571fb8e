// `rdv-bench compare ...`: runs bench/compare.py, which drives rdv-bench and
// its peers (ucx_perftest, raw gRPC) and prints the comparison.
#pragma once

namespace rdv {

// Replaces this process with python3 running compare.py (installed beside
// rdv's data, else from the source tree), passing argv[2..] and this
// executable as --rdv-bench. Returns 1, with a message on stderr, only when
// that fails.
int RunCompareScript(int argc, char** argv);

}  // namespace rdv
