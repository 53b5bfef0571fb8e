#!/usr/bin/env python3
"""Runs ucx_perftest between two processes on loopback, the peer rdv's
grpc+ucx is compared with: for each size, put, get and tag bandwidth, with
the UCX_TLS of the environment, several repetitions. Writes JSON:
[{"test": ..., "size": ..., "GBps": [per repetition]}].

    ucx_perftest.py OUT.json SIZE [SIZE ...]
"""
import json
import os
import socket
import subprocess
import sys
import time

TESTS = ["ucp_put_bw", "ucp_get", "tag_bw"]
REPETITIONS = int(os.environ.get("RDV_BENCH_REPETITIONS", "5"))
WAIT_LIMIT_S = 120


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def iterations_for(size):
    # About 256 MiB per run (put over tcp crawls at tens of MB/s), at least
    # 5 and at most 2000 iterations.
    return max(5, min(2000, (256 << 20) // size))


def final_fields(test, size, cpus=None):
    """One ucx_perftest run between a server and a client on loopback: the
    fields of its "Final:" line. `cpus`, when given, is (the client's CPU,
    the server's CPU): each process pinned to its own, as rdv-bench --cpu
    and --peer_cpu pin rdv's two. A ucx_perftest server serves one client
    and exits, so a client that reached it and failed gets a new server; a
    client that finds none listening yet tries again. Bounded by
    WAIT_LIMIT_S."""
    client_cpu, server_cpu = (["-c", str(cpus[0])], ["-c", str(cpus[1])]) if cpus else ([], [])
    deadline = time.monotonic() + WAIT_LIMIT_S
    last = None
    while time.monotonic() < deadline:
        port = free_port()
        server = subprocess.Popen(["ucx_perftest", "-p", str(port)] + server_cpu,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while server.poll() is None and time.monotonic() < deadline:
                last = subprocess.run(
                    ["ucx_perftest", "127.0.0.1", "-p", str(port), "-t", test, "-s", str(size),
                     "-n", str(iterations_for(size)), "-w", "2"] + client_cpu,
                    capture_output=True, text=True, timeout=WAIT_LIMIT_S)
                final = [line for line in last.stdout.splitlines() if line.startswith("Final:")]
                if last.returncode == 0 and final:
                    return final[0].split()
                time.sleep(0.05)  # the server may not listen yet
        finally:
            server.kill()
            server.wait()
    output = f"{last.stdout}{last.stderr}" if last else "no client ran"
    raise RuntimeError(f"ucx_perftest {test} {size}: no result within {WAIT_LIMIT_S} s; "
                       f"the last client said:\n{output}")


def run_once(test, size, cpus=None):
    """Bandwidth in GB/s."""
    mib_per_s = float(final_fields(test, size, cpus)[5])  # bandwidth average, MB/s = MiB/s
    return mib_per_s * (1 << 20) / 1e9


def main(out, sizes):
    rows = []
    for size in sizes:
        for test in TESTS:
            gbps = [run_once(test, size) for _ in range(REPETITIONS)]
            rows.append({"test": test, "size": size, "GBps": gbps})
            print(f"ucx_perftest {test:10s} {size:>10d} B  "
                  f"median {sorted(gbps)[len(gbps) // 2]:.3f} GB/s", flush=True)
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1], [int(s) for s in sys.argv[2:]])
