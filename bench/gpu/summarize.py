#!/usr/bin/env python3
"""Reads what bench/gpu/check.sh wrote and prints the GPU targets (rdv's copies
>= 0.9x cudaMemcpy at 64 MiB, CUDA IPC >= 0.8x a device-to-device copy):
the tests (passed, failed, skipped), rdv's copies against cudaMemcpy at
64 MiB (medians of the repetitions, with their spread), and two processes
GPU to GPU by CUDA IPC against a device-to-device cudaMemcpy. Exit status 1
when a step failed or a bar is missed.

    bench/gpu/summarize.py RESULTS_DIR
"""
import glob
import json
import os
import statistics
import sys
import xml.etree.ElementTree as ElementTree

MIB = 1 << 20
BAR_SIZE = 64 * MIB
DIRECTIONS = {0: "h2d", 1: "d2h", 2: "d2d"}


def load(path):
    with open(path) as f:
        return json.load(f)


def test_counts(results):
    print("tests (GoogleTest, pytest):")
    for path in sorted(glob.glob(os.path.join(results, "tests-*.json"))):
        counts = {"passed": 0, "failed": 0, "skipped": 0}
        for suite in load(path)["testsuites"]:
            for case in suite["testsuite"]:
                if case.get("failures"):
                    counts["failed"] += 1
                elif case.get("result") == "SKIPPED":
                    counts["skipped"] += 1
                else:
                    counts["passed"] += 1
        print(f"  {os.path.basename(path)[6:-5]:32} {counts['passed']} passed, "
              f"{counts['failed']} failed, {counts['skipped']} skipped")
    python = os.path.join(results, "tests-python.xml")
    if os.path.exists(python):
        suite = ElementTree.parse(python).getroot().find("testsuite")
        total, failed, skipped = (int(suite.get(k)) for k in ("tests", "failures", "skipped"))
        failed += int(suite.get("errors"))
        print(f"  {'python (pytest)':32} {total - failed - skipped} passed, {failed} failed, "
              f"{skipped} skipped")


def benchmark_medians(results):
    """(name, direction, bytes) -> (median, min, max) GB/s over repetitions."""
    runs = {}
    for run in load(os.path.join(results, "bench_gpu.json"))["benchmarks"]:
        if run.get("run_type") != "iteration" or run.get("error_occurred"):
            continue
        parts = dict(p.split(":") for p in run["run_name"].split("/")[1:3])
        key = (run["run_name"].split("/")[0], int(parts["direction"]), int(parts["bytes"]))
        runs.setdefault(key, []).append(run["bytes_per_second"] / 1e9)
    return {k: (statistics.median(v), min(v), max(v)) for k, v in runs.items()}


def fmt(spread):
    return f"{spread[0]:.1f} [{spread[1]:.1f}-{spread[2]:.1f}]"


def main():
    results = sys.argv[1]
    ok = all(step["exit_status"] == 0 for step in load(os.path.join(results, "steps.json")))
    test_counts(results)
    medians = benchmark_medians(results)
    if not medians:
        ok = False
        print("\nno GPU figures: every benchmark reported an error (see bench_gpu.log)")
    print("\nin one process, GB/s, median [min-max] of 5:")
    print(f"  {'copy':6} {'size':>8} {'rdv':>20} {'cudaMemcpy':>20} {'ratio':>6}")
    for direction, name in DIRECTIONS.items():
        for size in sorted({k[2] for k in medians if k[1] == direction}):
            rdv = medians.get(("BM_RdvRecv", direction, size))
            peer = medians.get(("BM_CudaMemcpy", direction, size))
            if rdv is None or peer is None:
                continue
            ratio = rdv[0] / peer[0]
            bar = size == BAR_SIZE and ratio < 0.9
            ok &= not bar
            print(f"  {name:6} {size // MIB:>6}Mi {fmt(rdv):>20} {fmt(peer):>20} {ratio:6.2f}"
                  f"{'  below the 0.9x bar' if bar else ''}")
    d2d = medians.get(("BM_CudaMemcpy", 2, BAR_SIZE))
    print("\ntwo processes, GPU 0 to GPU 0, GB/s (average of 20 verified Recvs), and the"
          " p50 Recv time:")
    for path in sorted(glob.glob(os.path.join(results, "rdv_bench-*.json"))):
        setting = os.path.basename(path)[len("rdv_bench-"):-5]
        for row in load(path):
            line = (f"  {setting:26} {row['size_bytes'] // MIB:>6}Mi {row['bw_GBps_avg']:8.2f}"
                    f" {row['lat_us_p50']:8.0f} us")
            if setting == "cuda_ipc" and row["size_bytes"] == BAR_SIZE and d2d:
                ratio = row["bw_GBps_avg"] / d2d[0]
                ok &= ratio >= 0.8
                line += f"  {ratio:.2f}x D2D cudaMemcpy{'  below the 0.8x bar' if ratio < 0.8 else ''}"
            print(line)
    print("\nall steps passed and every bar is met" if ok else "\na step failed or a bar is missed")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
