#!/usr/bin/env python3
"""torch.distributed send/recv between two processes: the rdv backend over
each protocol against gloo, in the same run.

    PYTHONPATH=build/release/python /usr/bin/python3 bench/torch_bench.py \
        [--backends gloo,grpc,grpc+ucx,grpc+ucx:shm] [--sizes 64,1K,64K,1M,16M,64M] \
        [--rounds 3] [--pin] [--plot torch_bench.png]

Each round runs every backend once, in turn, so that a busy moment of the
machine hits them all. "grpc+ucx:shm" is grpc+ucx over shared memory
(UCX_TLS=posix,cma,self; plain grpc+ucx goes over tcp, docs/configuration.md);
a ":nofast" suffix turns the fast path off (RDV_FAST_PATH=0), as in
"grpc+ucx:shm:nofast", to compare it with the default in the same run, and
a ":NAME=VALUE" suffix sets that variable in both ranks, as in
"grpc+ucx:shm:UCX_RNDV_THRESH=64K".
A run is a ping-pong: rank 0 sends SIZE bytes with
dist.send, rank 1 receives them with dist.recv into a preallocated tensor
and sends them back; one-way time is half a round trip (as osu_latency).
Prints the median one-way time over every round trip of every round
[10th-90th percentile] and the bandwidth SIZE / median, then each rdv
backend's bandwidth against gloo's. Targets: rdv at least as fast as gloo
at every size; >= 3x gloo at >= 1 MiB over shared memory.
After each round it prints every backend's median per size on standard
error, so that a run whose threads landed differently shows. --pin binds
rank r of every backend to CPU r (modulo the CPUs this script may use), as
a launcher binding each rank to its own core does; see docs/torch.md for
what that changes on a 2-core machine.
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.abspath(__file__)
WARMUP = 3
RESULT = "torch_bench result: "


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def show_size(size):
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if size >= scale and size % scale == 0:
            return f"{size // scale} {unit}iB"
    return f"{size} B"


def iterations(size):
    return max(10, min(300, (512 << 20) // max(size, 1)))


def rank_main(backend, rank, store, sizes, pin):
    """One rank: prints {size: [one-way seconds, ...]} as JSON (rank 0)."""
    if pin:
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    import torch
    import torch.distributed as dist
    # One intra-op thread: the two ranks share a small machine.
    torch.set_num_threads(1)
    if backend != "gloo":
        import rdv.torch  # noqa: F401
        protocol, *settings = backend.split(":")
        os.environ["RDV_PROTOCOL"] = protocol
        if "shm" in settings:
            os.environ["UCX_TLS"] = "posix,cma,self"
        if "nofast" in settings:
            os.environ["RDV_FAST_PATH"] = "0"
        for setting in settings:
            name, equals, value = setting.partition("=")
            if equals:
                os.environ[name] = value
    dist.init_process_group("gloo" if backend == "gloo" else "rdv", rank=rank, world_size=2,
                            init_method=f"file://{store}",
                            timeout=datetime.timedelta(seconds=120))
    samples = {}
    for size in sizes:
        tensor = torch.ones(size, dtype=torch.uint8)
        times = []
        for i in range(WARMUP + iterations(size)):
            start = time.perf_counter()
            if rank == 0:
                dist.send(tensor, 1)
                dist.recv(tensor, 1)
            else:
                dist.recv(tensor, 0)
                dist.send(tensor, 0)
            if i >= WARMUP:
                times.append((time.perf_counter() - start) / 2)
        samples[size] = times
    dist.destroy_process_group()
    if rank == 0:
        print(RESULT + json.dumps(samples), flush=True)


def run_pair(backend, sizes, pin):
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        size_list = ",".join(str(s) for s in sizes)
        ranks = [subprocess.Popen([sys.executable, HERE, "--rank", str(rank), "--backend",
                                   backend, "--store", store, "--sizes", size_list]
                                  + (["--pin"] if pin else []),
                                  stdout=subprocess.PIPE, text=True)
                 for rank in (0, 1)]
        out = [rank.communicate(timeout=900)[0] for rank in ranks]
        for rank in ranks:
            if rank.returncode != 0:
                sys.exit(f"{backend}: a rank exited with {rank.returncode}")
        line = next(line for line in out[0].splitlines() if line.startswith(RESULT))
        return {int(size): times for size, times in json.loads(line[len(RESULT):]).items()}


def percentile(values, fraction):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def plot(path, sizes, backends, medians):
    data = path + ".dat"
    with open(data, "w") as out:
        for backend in backends:
            out.write(f"# {backend}\n")
            for size in sizes:
                out.write(f"{size} {size / medians[backend][size] / 1e9}\n")
            out.write("\n\n")
    title = f"torch.distributed send/recv, {os.uname().nodename}, {time.strftime('%Y-%m-%d')}"
    lines = ", ".join(
        f'"{data}" index {i} with linespoints title "{b}"' + (" dashtype 2" if b == "gloo" else "")
        for i, b in enumerate(backends))
    script = (f'set terminal pngcairo size 900,600; set output "{path}"; set logscale xy; '
              f'set xlabel "message size (bytes)"; set ylabel "bandwidth (GB/s)"; '
              f'set title "{title}"; set key top left; plot {lines}')
    subprocess.run(["gnuplot", "-e", script], check=True)
    print(f"plot: {path}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="gloo,grpc,grpc+ucx,grpc+ucx:shm")
    parser.add_argument("--sizes", default="64,1K,64K,1M,16M,64M")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pin", action="store_true")
    parser.add_argument("--plot")
    parser.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--store", help=argparse.SUPPRESS)
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    if args.rank is not None:
        return rank_main(args.backend, args.rank, args.store, sizes, args.pin)

    backends = args.backends.split(",")
    samples = {b: {s: [] for s in sizes} for b in backends}
    for round_number in range(args.rounds):
        for backend in backends:
            pair = run_pair(backend, sizes, args.pin)
            for size, times in pair.items():
                samples[backend][size] += times
            in_round = ", ".join(f"{show_size(size)} {statistics.median(times) * 1e6:.1f}us"
                                 for size, times in pair.items())
            print(f"round {round_number + 1}/{args.rounds} {backend}: {in_round}", file=sys.stderr)

    medians = {b: {s: statistics.median(samples[b][s]) for s in sizes} for b in backends}
    print(f"{'backend':<10} {'size':>8} {'one-way p50':>12} {'[p10-p90] us':>18} {'GB/s':>8}"
          f" {'vs gloo':>8}")
    for backend in backends:
        for size in sizes:
            times = samples[backend][size]
            ratio = ""
            if "gloo" in medians and backend != "gloo":
                ratio = f"{medians['gloo'][size] / medians[backend][size]:.2f}x"
            print(f"{backend:<10} {show_size(size):>8} {medians[backend][size] * 1e6:>10.1f}us"
                  f" {percentile(times, 0.1) * 1e6:>8.1f}-{percentile(times, 0.9) * 1e6:<8.1f}"
                  f" {size / medians[backend][size] / 1e9:>8.3f} {ratio:>8}")
    if args.plot:
        plot(args.plot, sizes, backends, medians)


if __name__ == "__main__":
    main()
