#!/usr/bin/env python3
"""Receiving from Python against rdv-bench, over the same protocol in the
same run: does the Python module keep up with the C++ it wraps?

    PYTHONPATH=build/release/python /usr/bin/python3 bench/python_bench.py \
        [--protocols grpc,grpc+ucx] [--sizes 1M,64M] [--rounds 5] [--iters 30]

Per round and protocol, alternately: `rdv-bench --local` (one Recv in
flight, bytes not verified) and this script's own pair of processes, a
Python producer that sends the same array ITERS times and this process
receiving them one by one with Worker.recv. Bandwidth is size / the median
Recv time. Prints the medians over the rounds [min-max] and the ratio
Python / rdv-bench; the target is >= 0.9x at 1 MiB and 64 MiB.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

import rdv

HERE = os.path.dirname(os.path.abspath(__file__))
CONSUMER_DEVICE = "/job:worker/replica:0/task:1/device:CPU:0"
WARMUP = 3
# rdv-bench warms up two windows of first use (RecvTensor, the wireup) before --warmup's Recvs.
UNTIMED = 2 + WARMUP


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def produce(protocol):
    """The producer: sends what each stdin line asks for ("STEP SIZE COUNT")."""
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1,127.0.0.1:1", protocol=protocol) as w:
        key = rdv.create_key(w.device(), w.incarnation, CONSUMER_DEVICE, "bench")
        print(json.dumps({"address": w.address, "key": key}), flush=True)
        for line in sys.stdin:
            step, size, count = (int(x) for x in line.split())
            array = np.ones(size, np.uint8)
            for _ in range(count):
                w.send(step, key, array)
            print("sent", flush=True)


def python_p50_s(protocol, sizes, iters):
    producer = subprocess.Popen([sys.executable, __file__, "--produce", protocol],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hello = json.loads(producer.stdout.readline())
    medians = {}
    with rdv.Worker(task=1, cluster={"worker": [hello["address"], "127.0.0.1:1"]},
                    protocol=protocol) as w:
        for step, size in enumerate(sizes, start=1):
            producer.stdin.write(f"{step} {size} {UNTIMED + iters}\n")
            producer.stdin.flush()
            producer.stdout.readline()
            times = []
            for i in range(UNTIMED + iters):
                start = time.perf_counter()
                array = w.recv(step, hello["key"], timeout=60)
                elapsed = time.perf_counter() - start
                if array.nbytes != size:
                    sys.exit(f"received {array.nbytes} bytes, expected {size}")
                if i >= UNTIMED:
                    times.append(elapsed)
                del array
            w.cleanup_step(step)
            medians[size] = statistics.median(times)
    producer.stdin.close()
    producer.wait(60)
    return medians


def rdv_bench_p50_s(rdv_bench, protocol, sizes, iters):
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        subprocess.run([rdv_bench, "--local", "--protocol", protocol, "--sizes",
                        ",".join(str(s) for s in sizes), "--iters", str(iters),
                        "--warmup", str(WARMUP), "--in_flight", "1", "--no_verify",
                        "--json", out.name], check=True, stdout=subprocess.DEVNULL)
        rows = json.load(open(out.name))
    return {row["size_bytes"]: row["lat_us_p50"] / 1e6 for row in rows}


def spread(values):
    return f"{statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]"


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--produce":
        return produce(sys.argv[2])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rdv-bench", default=os.path.join(
        HERE, "..", "build", "release", "apps", "rdv-bench"))
    parser.add_argument("--protocols", default="grpc,grpc+ucx")
    parser.add_argument("--sizes", default="1M,64M")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    protocols = args.protocols.split(",")
    gbps = {}  # (protocol, subject, size) -> [GB/s per round]
    for _ in range(args.rounds):
        for protocol in protocols:
            for subject, measure in (("rdv-bench", lambda: rdv_bench_p50_s(
                    args.rdv_bench, protocol, sizes, args.iters)),
                                     ("python", lambda: python_p50_s(protocol, sizes, args.iters))):
                for size, seconds in measure().items():
                    gbps.setdefault((protocol, subject, size), []).append(size / seconds / 1e9)
    print(f"{'protocol':10} {'size':>9}  {'rdv-bench GB/s':>24}  {'python GB/s':>24}  "
          "python/rdv-bench")
    for protocol in protocols:
        for size in sizes:
            cpp = gbps[(protocol, "rdv-bench", size)]
            py = gbps[(protocol, "python", size)]
            ratio = statistics.median(py) / statistics.median(cpp)
            verdict = "meets >= 0.9x" if ratio >= 0.9 else "misses >= 0.9x"
            print(f"{protocol:10} {size:>9}  {spread(cpp):>24}  {spread(py):>24}  "
                  f"{ratio:.2f}x ({verdict})")


if __name__ == "__main__":
    main()
