#!/usr/bin/env python3
"""What the door costs: rdv-bench --local with and without mutual TLS and a
cluster token (tests/control/with-test-ca), runs alternated in one session
so that both see the same machine. Prints the 64 B Recv latency (p50) and
the 1 MiB bandwidth, medians [min-max] over the repetitions, and the ratio
door / no door.

usage: tls_cost.py RDV_BENCH [--repetitions N] [--settings 'grpc;grpc+ucx:tcp']
(a setting: a protocol, and after ':' the UCX_TLS it runs under)
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WITH_TEST_CA = os.path.join(SOURCE, "tests", "control", "with-test-ca")


def run(bench, protocol, door, ucx_tls):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        command = [bench, "--local", "--protocol", protocol, "--sizes", "64,1M", "--time_s", "2",
                   "--json", out.name]
        if door:
            command = [WITH_TEST_CA] + command
        env = dict(os.environ)
        for name in ("RDV_TLS_CERT", "RDV_TLS_KEY", "RDV_TLS_CA", "RDV_CLUSTER_TOKEN",
                     "RDV_CLUSTER_TOKEN_FILE"):
            env.pop(name, None)
        if ucx_tls:
            env["UCX_TLS"] = ucx_tls
        subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL)
        rows = {row["size_bytes"]: row for row in json.load(open(out.name))}
    return rows[64]["lat_us_p50"], rows[1 << 20]["bw_GBps_avg"]


def spread(values):
    return f"{statistics.median(values):.2f} [{min(values):.2f}-{max(values):.2f}]"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bench")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--settings", default="grpc;grpc+ucx:tcp;grpc+ucx:posix,cma,self")
    args = parser.parse_args()
    settings = [item.partition(":")[::2] for item in args.settings.split(";")]
    results = {}
    for repetition in range(args.repetitions):
        for protocol, ucx_tls in settings:
            for door in (False, True):
                latency, bandwidth = run(args.bench, protocol, door, ucx_tls)
                key = (protocol, ucx_tls, door)
                results.setdefault(key, ([], []))
                results[key][0].append(latency)
                results[key][1].append(bandwidth)
        print(f"repetition {repetition + 1} of {args.repetitions} done", file=sys.stderr)
    print("| protocol | UCX_TLS | 64 B p50 µs, no door | with TLS + token | ratio | "
          "1 MiB GB/s, no door | with TLS + token | ratio |")
    print("|---|---|---|---|---|---|---|---|")
    for protocol, ucx_tls in settings:
        plain = results[(protocol, ucx_tls, False)]
        door = results[(protocol, ucx_tls, True)]
        print(f"| {protocol} | {ucx_tls or '-'} | {spread(plain[0])} | {spread(door[0])} | "
              f"{statistics.median(door[0]) / statistics.median(plain[0]):.2f}x | "
              f"{spread(plain[1])} | {spread(door[1])} | "
              f"{statistics.median(door[1]) / statistics.median(plain[1]):.2f}x |")


if __name__ == "__main__":
    main()
