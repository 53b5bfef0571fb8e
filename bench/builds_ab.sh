#!/usr/bin/env bash
# builds_ab.sh BEFORE_BUILD_DIR AFTER_BUILD_DIR
# Two builds of rdv side by side (e.g. a `git worktree` of the base commit,
# built with scripts/build release), alternated in one run so that the
# machine's drift hits both alike: ROUNDS (default 5) rounds, each running
# both builds' rdv-bench --local over grpc+ucx under shared memory and tcp.
# Prints, per setting and build, the median [min-max] over the rounds of the
# 64 B Recv's p50 latency and of the 1 MiB average bandwidth, and the ratio
# after / before.
set -euo pipefail
before=$1 after=$2
rounds=${ROUNDS:-5}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
for ((round = 1; round <= rounds; ++round)); do
  for tls in posix,cma,self tcp; do
    for build in "$before" "$after"; do
      name=$([[ $build == "$before" ]] && echo before || echo after)
      UCX_TLS=$tls "$build/apps/rdv-bench" --local --protocol=grpc+ucx --sizes=64,1M \
        --iters=300 2>/dev/null |
        awk -v t="$tls" -v b="$name" '$1 ~ /^[0-9]+$/ {print t, b, $1, $4, $5}' >>"$log"
    done
  done
done
python3 - "$log" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(list)
for line in open(sys.argv[1]):
    tls, build, size, bw, p50 = line.split()
    value = float(p50) if size == "64" else float(bw)
    runs[(tls, int(size), build)].append(value)
def cell(values):
    return f"{statistics.median(values):8.2f} [{min(values):.2f}-{max(values):.2f}]"
print(f"{'UCX_TLS':16} {'measure':22} {'before':>26} {'after':>26}  after/before")
for tls in ("posix,cma,self", "tcp"):
    for size, what in ((64, "64 B p50 latency (us)"), (1 << 20, "1 MiB bandwidth (GB/s)")):
        b, a = runs[(tls, size, "before")], runs[(tls, size, "after")]
        print(f"{tls:16} {what:22} {cell(b):>26} {cell(a):>26}  "
              f"{statistics.median(a) / statistics.median(b):.3f}")
PY
