#!/usr/bin/env bash
# Measures the fast path (docs/fast_path.md) against RecvTensor in one run:
# ROUNDS rounds, each running, over shared memory and tcp, RecvTensor
# (RDV_FAST_PATH=0), the fast path's design A (a tagged send, the default
# over these transports) and its design B (a write and a notice,
# RDV_FAST_PATH_WRITES=1), and raw gRPC unary at 64 B, interleaved so that
# the machine's drift hits all alike. Prints the median p50 latency of each,
# its range, and the ratios. Needs build/release (scripts/build release).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
sizes=${SIZES:-64,65536,1M}
bench=build/release/apps/rdv-bench
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  for tls in posix,cma,self tcp; do
    for mode in off send write; do
      RDV_FAST_PATH=$([[ $mode == off ]] && echo 0 || echo 1) \
        RDV_FAST_PATH_WRITES=$([[ $mode == write ]] && echo 1 || echo 0) \
        UCX_TLS=$tls "$bench" --local --protocol=grpc+ucx --sizes="$sizes" --iters=300 \
        2>/dev/null |
        awk -v t="$tls" -v m="$mode" '$1 ~ /^[0-9]+$/ {print t, m, $1, $5}' >>"$log"
    done
  done
  "$bench" --local --subject=grpc-raw --sizes=64 --iters=300 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ {print "grpc-raw", "-", $1, $5}' >>"$log"
done
python3 - "$log" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    setting, mode, size, p50 = line.split()
    runs[(setting, mode, int(size))].append(float(p50))
raw = statistics.median(runs[("grpc-raw", "-", 64)])
median = lambda mode: statistics.median(runs[(setting, mode, size)])
span = lambda mode: (f"{median(mode):7.1f} "
                     f"[{min(runs[(setting, mode, size)]):.0f}-{max(runs[(setting, mode, size)]):.0f}]")
print(f"raw gRPC unary 64 B: p50 {raw:.1f} us")
print(f"{'transport':16}{'bytes':>9}  {'RecvTensor p50 [range]':>24}  {'A send p50 [range]':>24}  "
      f"{'B write p50 [range]':>24}  A/off  B/off    B/A  A/raw")
for setting, mode, size in sorted(runs):
    if mode != "off":
        continue
    print(f"{setting:16}{size:>9}  {span('off'):>24}  {span('send'):>24}  {span('write'):>24}  "
          f"{median('send') / median('off'):5.2f}  {median('write') / median('off'):5.2f}  "
          f"{median('write') / median('send'):5.2f}  {median('send') / raw:5.2f}")
PY
