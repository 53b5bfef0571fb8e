#!/usr/bin/env python3
"""rdv-bench smoke test: --local over each protocol this machine has, two
small sizes, bytes verified, JSON read back and its fields checked; one
small `compare` run and its rows; --cpu and --peer_cpu placing the two
processes, a CPU outside the set refused; a bad protocol and an unreachable peer
each give a one-line error and exit 1; --memory cuda runs GPU to GPU, or
without a GPU is a one-line refusal.

With --rdma-only (tests/softroce, in a guest that has RDMA devices): only
the --local checks of the protocols that need one, grpc+verbs and grpc+ucx
over rc_verbs; the rest is the same on any machine and runs outside.

usage: rdv_bench_smoke.py RDV_BENCH [--rdma-only]"""
import json
import os
import subprocess
import sys
import tempfile

bench = sys.argv[1]
if sys.argv[2:] not in ([], ["--rdma-only"]):
    sys.exit("usage: rdv_bench_smoke.py RDV_BENCH [--rdma-only]")
rdma_only = sys.argv[2:] == ["--rdma-only"]
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def run(args, env=None):
    return subprocess.run([bench] + args, capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, **(env or {})))


have_rdma = os.path.isdir("/sys/class/infiniband") and bool(os.listdir("/sys/class/infiniband"))
if rdma_only:
    if not have_rdma:
        print("FAIL: --rdma-only and no RDMA device", file=sys.stderr)
        sys.exit(1)
    # UCX over SoftRoCE needs UCX_UD_VERBS_ETH_DGID_CHECK=n.
    device = os.environ.get("RDV_IB_DEVICE", "rxe0")
    protocols = [("grpc+verbs", {}),
                 ("grpc+ucx", {"UCX_TLS": "rc_verbs,ud_verbs", "UCX_UD_VERBS_ETH_DGID_CHECK": "n",
                               "UCX_NET_DEVICES": device + ":1"})]
else:
    protocols = [("grpc", {}), ("grpc+ucx", {"UCX_TLS": "tcp"}),
                 ("grpc+ucx", {"UCX_TLS": "posix,cma,self"})]
    if have_rdma:
        protocols.append(("grpc+verbs", {}))
    else:
        print("skipped: grpc+verbs (no RDMA device; tests/softroce covers it)")

fields = {"subject", "transport_env", "keys", "size_bytes", "iterations", "bw_GBps_avg",
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
            check(row["iterations"] == 5 and row["verified"] and row["keys"] == "recurring",
                  f"{name}: {row}")
            check(row["bw_GBps_avg"] > 0 and row["lat_us_p99"] >= row["lat_us_p50"] > 0,
                  f"{name}: figures {row}")

if rdma_only:
    sys.exit(1 if failures else 0)

# --keys first: every Recv of a key never received before, so no Recv
# takes the fast path; the bytes are still right and the rows say so. Two
# sizes: the first leaves values it did not receive in its step.
with tempfile.TemporaryDirectory() as scratch:
    out = os.path.join(scratch, "first.json")
    result = run(["--local", "--protocol", "grpc+ucx", "--sizes", "4K,64K", "--iters", "5",
                  "--keys", "first", "--stats", "--json", out], {"UCX_TLS": "tcp"})
    check(result.returncode == 0, f"--keys first: exit {result.returncode}: {result.stderr[-500:]}")
    if result.returncode == 0:
        rows = json.load(open(out))
        check([(r["size_bytes"], r["keys"], r["verified"]) for r in rows] ==
              [(4096, "first", True), (65536, "first", True)], f"--keys first: {rows}")
        check('rdv_sent_transfers_total{path="fast_path"}' not in result.stdout,
              f"--keys first took the fast path: {result.stdout[-800:]}")
result = run(["--local", "--protocol", "grpc", "--keys", "sometimes"])
check(result.returncode == 1 and "--keys" in result.stderr, f"--keys sometimes: {result.stderr}")

# --stats: both ends' counters after the table, the path the bytes took.
result = run(["--local", "--protocol", "grpc+ucx", "--sizes", "128K", "--iters", "5", "--stats"],
             {"UCX_TLS": "tcp"})
check(result.returncode == 0 and "counters of both ends" in result.stdout
      and 'rdv_sent_transfers_total{path="transport_tag"}' in result.stdout
      and "rdv_received_bytes_total" in result.stdout,
      f"--stats: exit {result.returncode}: {result.stdout[-800:]}")

# --cpu and --peer_cpu: each process on the CPU it was given, as the header
# says (read back from the kernel); a CPU outside this process' set is refused.
cpus = sorted(os.sched_getaffinity(0))
result = run(["--local", "--protocol", "grpc", "--sizes", "4K", "--iters", "5",
              "--cpu", str(cpus[0]), "--peer_cpu", str(cpus[-1])])
check(result.returncode == 0
      and f"this process on CPU {cpus[0]}, the peer on CPU {cpus[-1]}" in result.stdout,
      f"--cpu/--peer_cpu: exit {result.returncode}: {result.stdout[:400]}{result.stderr[-400:]}")
result = run(["--local", "--protocol", "grpc", "--cpu", str(cpus[-1] + 1)])
check(result.returncode == 1 and "may run on CPUs" in result.stderr,
      f"--cpu outside the set: exit {result.returncode}: {result.stderr[-400:]}")

# compare: one small run, its rows read back.
compare_fields = {"subject", "transport_env", "keys", "table", "size_bytes", "repetitions",
                  "bw_GBps_median", "bw_GBps_min", "bw_GBps_max", "lat_us_p50", "lat_us_p99"}
with tempfile.TemporaryDirectory() as scratch:
    out = os.path.join(scratch, "compare.json")
    result = run(["compare", "--sizes", "4K", "--repetitions", "1", "--ucx-tls", "tcp",
                  "--json", out])
    check(result.returncode == 0, f"compare: exit {result.returncode}: {result.stderr[-800:]}")
    check("rdv mean" in result.stdout, f"compare: no time per Recv: {result.stdout[-800:]}")
    if result.returncode == 0:
        rows = json.load(open(out))
        latency = {(r["subject"], r["transport_env"]) for r in rows if r["table"] == "latency"}
        check(latency == {("grpc-raw", ""), ("ucx_perftest:tag_lat", "UCX_TLS=tcp"),
                          ("rdv:grpc+ucx", "UCX_TLS=tcp RDV_UCX_PROGRESS=wait"),
                          ("rdv:grpc+ucx", "UCX_TLS=tcp RDV_UCX_PROGRESS=poll")},
              f"compare: latency table rows {sorted(latency)}")
        subjects = {(r["subject"], r["transport_env"]) for r in rows if r["table"] == "sizes"}
        expected = {("rdv:grpc", ""), ("grpc-raw", ""), ("rdv:grpc+ucx", "UCX_TLS=tcp"),
                    ("ucx_perftest:ucp_put_bw", "UCX_TLS=tcp"), ("ucx_perftest:ucp_get", "UCX_TLS=tcp"),
                    ("ucx_perftest:tag_bw", "UCX_TLS=tcp"), ("ucx_perftest:tag_lat", "UCX_TLS=tcp")}
        check(expected <= subjects, f"compare: subjects {sorted(subjects)}")
        ucx_keys = {r["keys"] for r in rows if r["subject"] == "rdv:grpc+ucx"}
        check(ucx_keys == {"recurring", "first"}, f"compare: rdv:grpc+ucx keys {ucx_keys}")
        for row in rows:
            check(set(row) == compare_fields, f"compare: fields {sorted(row)}")
            check(row["size_bytes"] == (64 if row["table"] == "latency" else 4096)
                  and row["repetitions"] == 1
                  and row["bw_GBps_min"] <= row["bw_GBps_median"] <= row["bw_GBps_max"],
                  f"compare: {row}")
        check("rdv:grpc beside raw gRPC" in result.stdout, "compare: no table")
        check(("pinned for the 64 B table" if len(cpus) >= 2 else "every process unpinned")
              in result.stdout,
              f"compare: placement not stated: {result.stdout[:400]}")
        check("64 B Recv of a recurring key" in result.stdout, "compare: no latency table")

for args, what in [(["--local", "--protocol", "carrierpigeon"], "unknown protocol"),
                   (["--client", "127.0.0.1:1", "--protocol", "grpc"], "unreachable peer")]:
    result = run(args)
    lines = result.stderr.strip().splitlines()
    check(result.returncode == 1, f"{what}: exit {result.returncode}")
    check(len(lines) == 1 and lines[0].startswith("rdv-bench: "), f"{what}: stderr {lines}")

# GPU 0 to GPU 0 where there is a GPU; without one, a one-line refusal.
result = run(["--local", "--protocol", "grpc", "--memory", "cuda", "--sizes", "4K,1M"])
lines = result.stderr.strip().splitlines()
if result.returncode == 0:
    check("1048576" in result.stdout, f"--memory cuda: no 1 MiB row in {result.stdout}")
else:
    check(result.returncode == 1 and len(lines) == 1 and "--memory cuda: " in lines[0],
          f"--memory cuda without a GPU: exit {result.returncode}, stderr {lines}")

sys.exit(1 if failures else 0)
