#!/usr/bin/env python3
"""Summarizes rdv_bench_intra's JSON: medians, spread, ratios, the bars."""
import json
import sys

PAIR_BAR_NS = 250.0
SIZE_BAR_RATIO = 1.10
KIB, GIB = 1 << 10, 1 << 30


def aggregates(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    table = {}
    for run in runs:
        if run.get("run_type") == "aggregate":
            table[(run["run_name"], run["aggregate_name"])] = run
    return table


def ns(table, name, stat="median"):
    return table[(name, stat)]["real_time"]


def main(path):
    t = aggregates(path)
    pair_kib = ns(t, f"BM_IntraProcessSendRecv/{KIB}")
    pair_gib = ns(t, f"BM_IntraProcessSendRecv/{GIB}")
    memcpy_kib = ns(t, f"BM_HostMemcpy/{KIB}")
    memcpy_gib = ns(t, f"BM_HostMemcpy/{GIB}")
    cv = t[(f"BM_IntraProcessSendRecv/{KIB}", "cv")]["real_time"] * 100
    ratio = pair_gib / pair_kib
    ok_pair = pair_kib <= PAIR_BAR_NS and pair_gib <= PAIR_BAR_NS
    ok_size = ratio <= SIZE_BAR_RATIO
    print()
    print("rdv intra-process rendezvous, host tensors (median of repetitions)")
    print(f"  Send+Recv 1 KiB   {pair_kib:10.1f} ns  (cv {cv:.1f}%)   memcpy 1 KiB {memcpy_kib:10.1f} ns")
    print(f"  Send+Recv 1 GiB   {pair_gib:10.1f} ns                memcpy 1 GiB {memcpy_gib / 1e6:10.1f} ms")
    print(f"  1 GiB / 1 KiB     {ratio:10.2f}     (bar <= {SIZE_BAR_RATIO:.2f}: {'met' if ok_size else 'MISSED'})")
    print(f"  pair vs bar       {max(pair_kib, pair_gib):10.1f} ns  (bar <= {PAIR_BAR_NS:.0f} ns: {'met' if ok_pair else 'MISSED'})")
    print(f"  1 GiB memcpy / rdv pair: {memcpy_gib / pair_gib:,.0f}x (the buffer is shared, not copied)")
    for threads in (1, 2):
        name = f"BM_IntraProcessThroughput/real_time/threads:{threads}"
        if (name, "median") in t:
            # Google Benchmark reports the per-thread rate; sum the threads.
            rate = t[(name, "median")]["items_per_second"] * threads
            print(f"  throughput, {threads} thread(s): {rate / 1e6:6.2f} M pairs/s in all")
    return 0 if ok_pair and ok_size else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
