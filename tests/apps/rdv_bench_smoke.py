#!/usr/bin/env python3
"""rdv-bench smoke test: --local over each protocol this machine has, two
small sizes, bytes verified, JSON read back and its fields checked; a bad
protocol and an unreachable peer each give a one-line error and exit 1.

usage: rdv_bench_smoke.py RDV_BENCH"""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, env=None):
    return subprocess.run([bench] + args, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


protocols = [("grpc", {}), ("grpc+ucx", {"UCX_TLS": "tcp"}),
             ("grpc+ucx", {"UCX_TLS": "posix,cma,self"})]
if os.path.isdir("/sys/class/infiniband") and os.listdir("/sys/class/infiniband"):
    protocols.append(("grpc+verbs", {}))
else:
    print("skipped: grpc+verbs (no RDMA device; tests/softroce covers it)")

fields = {"subject", "transport_env", "size_bytes", "iterations", "bw_GBps_avg",
          "bw_GBps_peak", "lat_us_p50", "lat_us_p99", "verified"}
with tempfile.TemporaryDirectory() as scratch:
    for protocol, env in protocols:
        out = os.path.join(scratch, "out.json")
        result = run(["--local", "--protocol", protocol, "--sizes", "4K,64K", "--iters", "5",
                      "--json", out], env)
        name = f"{protocol} {env}"
        check(result.returncode == 0, f"{name}: exit {result.returncode}: {result.stderr[-500:]}")
        if result.returncode != 0:
            continue
        check("#bytes" in result.stdout and "65536" in result.stdout, f"{name}: no table")
        rows = json.load(open(out))
        check([r["size_bytes"] for r in rows] == [4096, 65536], f"{name}: sizes {rows}")
        for row in rows:
            check(set(row) == fields, f"{name}: fields {sorted(row)}")
            check(row["subject"] == "rdv:" + protocol, f"{name}: subject {row['subject']}")
            check(row["iterations"] == 5 and row["verified"], f"{name}: {row}")
            check(row["bw_GBps_avg"] > 0 and row["lat_us_p99"] >= row["lat_us_p50"] > 0,
                  f"{name}: figures {row}")

for args, what in [(["--local", "--protocol", "carrierpigeon"], "unknown protocol"),
                   (["--client", "127.0.0.1:1", "--protocol", "grpc"], "unreachable peer")]:
    result = run(args)
    lines = result.stderr.strip().splitlines()
    check(result.returncode == 1, f"{what}: exit {result.returncode}")
    check(len(lines) == 1 and lines[0].startswith("rdv-bench: "), f"{what}: stderr {lines}")

sys.exit(1 if failures else 0)
