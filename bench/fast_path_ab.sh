#!/usr/bin/env bash
# Measures the fast path (docs/fast_path.md) against RecvTensor in one run:
# ROUNDS rounds, each running RDV_FAST_PATH=0 then 1 over shared memory and
# tcp, and raw gRPC unary at 64 B, interleaved so that the machine's drift
# hits both alike. Prints the median p50 latency of each, its range, and the
# ratios. Needs build/release (scripts/build release).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${ROUNDS:-5}
sizes=${SIZES:-64,65536,1M}
bench=build/release/apps/rdv-bench
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  for tls in posix,cma,self tcp; do
    for fast in 0 1; do
      RDV_FAST_PATH=$fast UCX_TLS=$tls "$bench" --local --protocol=grpc+ucx --sizes="$sizes" \
        --iters=300 2>/dev/null |
        awk -v t="$tls" -v f="$fast" '$1 ~ /^[0-9]+$/ {print t, "fast=" f, $1, $5}' >>"$log"
    done
  done
  "$bench" --local --subject=grpc-raw --sizes=64 --iters=300 2>/dev/null |
    awk '$1 ~ /^[0-9]+$/ {print "grpc-raw", "-", $1, $5}' >>"$log"
done
python3 - "$log" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    setting, fast, size, p50 = line.split()
    runs[(setting, fast, int(size))].append(float(p50))
raw = statistics.median(runs[("grpc-raw", "-", 64)])
print(f"raw gRPC unary 64 B: p50 {raw:.1f} us")
print(f"{'transport':16}{'bytes':>9}  {'off p50 [range]':>24}  {'on p50 [range]':>24}  on/off  on/raw")
for (setting, fast, size), off in sorted(runs.items()):
    if fast != "fast=0":
        continue
    on = runs[(setting, "fast=1", size)]
    span = lambda v: f"{statistics.median(v):7.1f} [{min(v):.0f}-{max(v):.0f}]"
    print(f"{setting:16}{size:>9}  {span(off):>24}  {span(on):>24}  "
          f"{statistics.median(on) / statistics.median(off):6.2f}  {statistics.median(on) / raw:6.2f}")
PY
