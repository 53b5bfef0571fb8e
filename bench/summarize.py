#!/usr/bin/env python3
"""Summarizes rdv's Google Benchmark JSON against the peers measured in the
same run: medians of the repetitions with their [min-max] spread, ratios,
and the bars each issue set. Exit status 1 when a bar is missed.

    summarize.py intra  bench_intra.json
    summarize.py remote bench_remote.json
    summarize.py ucx    LABEL bench_ucx.json pss.json ucx_perftest.json
"""
import json
import os
import statistics
import sys
from collections import defaultdict

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
# Moving 1 GiB may grow the two processes' Pss together by 2.2 GiB: the
# source, the destination and a tenth of a GiB for the rest.
PSS_BAR_MIB = int(2.2 * 1024)


def load(path):
    """Per run_name, the list of per-repetition results."""
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    table = defaultdict(list)
    for run in runs:
        if run.get("run_type") == "iteration" and not run.get("error_occurred"):
            table[run["run_name"]].append(run)
    return table


def spread(runs, key):
    values = [r[key] for r in runs]
    return statistics.median(values), min(values), max(values)


def time_ns(runs):
    return spread(runs, "real_time")  # time_unit is ns unless set


def gbps(runs):
    """'median [min-max]' of a (median, min, max) of bytes/s, in GB/s."""
    return f"{runs[0] / 1e9:7.3f} [{runs[1] / 1e9:.2f}-{runs[2] / 1e9:.2f}]"


def verdict(ok):
    return "met" if ok else "MISSED"


def intra(table):
    pair_kib = time_ns(table[f"BM_IntraProcessSendRecv/{KIB}"])
    pair_gib = time_ns(table[f"BM_IntraProcessSendRecv/{GIB}"])
    memcpy_kib = time_ns(table[f"BM_HostMemcpy/{KIB}"])
    memcpy_gib = time_ns(table[f"BM_HostMemcpy/{GIB}"])
    ratio = pair_gib[0] / pair_kib[0]
    ok_pair = max(pair_kib[0], pair_gib[0]) <= 250
    ok_size = ratio <= 1.10
    print("\nrdv intra-process rendezvous, host tensors: median [min-max] of repetitions")
    print(f"  Send+Recv 1 KiB  {pair_kib[0]:8.1f} ns [{pair_kib[1]:.1f}-{pair_kib[2]:.1f}]"
          f"   memcpy 1 KiB {memcpy_kib[0]:8.1f} ns")
    print(f"  Send+Recv 1 GiB  {pair_gib[0]:8.1f} ns [{pair_gib[1]:.1f}-{pair_gib[2]:.1f}]"
          f"   memcpy 1 GiB {memcpy_gib[0] / 1e6:8.1f} ms")
    print(f"  1 GiB / 1 KiB    {ratio:8.2f}    bar <= 1.10: {verdict(ok_size)}")
    print(f"  pair             {max(pair_kib[0], pair_gib[0]):8.1f} ns  bar <= 250 ns: {verdict(ok_pair)}")
    print(f"  1 GiB memcpy / rdv pair: {memcpy_gib[0] / pair_gib[0]:,.0f}x (shared, not copied)")
    for threads in (1, 2):
        name = f"BM_IntraProcessThroughput/real_time/threads:{threads}"
        if name in table:
            # Google Benchmark reports the per-thread rate; sum the threads.
            rate = spread(table[name], "items_per_second")[0] * threads
            print(f"  throughput, {threads} thread(s): {rate / 1e6:6.2f} M pairs/s in all")
    return ok_pair and ok_size


def sizes_of(table, prefix):
    return sorted(int(name.split("/")[1]) for name in table if name.startswith(prefix + "/"))


def human(size):
    for unit, scale in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if size >= scale:
            return f"{size // scale} {unit}"
    return f"{size} B"


def remote(table):
    ok = True
    print("\nrdv protocol grpc vs raw gRPC unary, two processes on loopback:"
          " median [min-max] GB/s of repetitions")
    print(f"  {'size':>8}  {'rdv grpc':>24}  {'raw gRPC unary':>24}  {'ratio':>6}")
    for size in sizes_of(table, "BM_GrpcRecv"):
        if size < 4 * KIB:
            continue
        rdv = spread(table[f"BM_GrpcRecv/{size}/real_time"], "bytes_per_second")
        raw = spread(table[f"BM_RawGrpcUnary/{size}/real_time"], "bytes_per_second")
        ratio = rdv[0] / raw[0]
        bar = ""
        if size >= MIB:
            ok = ok and ratio >= 0.8
            bar = f"  bar >= 0.8: {verdict(ratio >= 0.8)}"
        print(f"  {human(size):>8}  {gbps(rdv):>24}  {gbps(raw):>24}  {ratio:6.2f}{bar}")
    rdv = spread(table["BM_GrpcRecv/64/real_time"], "real_time")
    raw = spread(table["BM_RawGrpcUnary/64/real_time"], "real_time")
    ratio = rdv[0] / raw[0]
    ok = ok and ratio <= 1.2
    print(f"  64 B round trip: rdv Recv {rdv[0]:.0f} us [{rdv[1]:.0f}-{rdv[2]:.0f}],"
          f" raw unary {raw[0]:.0f} us [{raw[1]:.0f}-{raw[2]:.0f}],"
          f" ratio {ratio:.2f}  bar <= 1.2: {verdict(ratio <= 1.2)}")
    return ok


def ucx(label, table, pss_table, perftest_path):
    """grpc+ucx against ucx_perftest (best test per size) and protocol grpc."""
    with open(perftest_path) as f:
        perftest = json.load(f)
    best = {}
    for row in perftest:
        median = statistics.median(row["GBps"])
        if median > best.get(row["size"], (0, "", []))[0]:
            best[row["size"]] = (median, row["test"], row["GBps"])
    shm = label == "shm"
    ok = True
    print(f"\nrdv grpc+ucx, UCX_TLS={os.environ.get('UCX_TLS', '(default)')} ({label}):"
          " median [min-max] GB/s of repetitions")
    print(f"  {'size':>8}  {'grpc+ucx':>22}  {'grpc':>22}  {'best ucx_perftest':>30}"
          f"  {'/perftest':>9}  {'/grpc':>6}")
    for size in sizes_of(table, "BM_GrpcUcxRecv"):
        if size < 4 * KIB:
            continue
        rdv = spread(table[f"BM_GrpcUcxRecv/{size}/real_time"], "bytes_per_second")
        grpc = spread(table[f"BM_GrpcRecv/{size}/real_time"], "bytes_per_second")
        vs_grpc = rdv[0] / grpc[0]
        line = f"  {human(size):>8}  {gbps(rdv):>22}  {gbps(grpc):>22}"
        bars = []
        if size in best:
            peer, test, runs = best[size]
            vs_peer = rdv[0] / 1e9 / peer
            line += f"  {peer:6.3f} [{min(runs):.2f}-{max(runs):.2f}] {test:>10}  {vs_peer:9.2f}"
            if size == 64 * MIB:
                ok = ok and vs_peer >= 0.9
                bars.append(f"64 MiB >= 0.9x perftest: {verdict(vs_peer >= 0.9)}")
        else:
            line += f"  {'':>30}  {'':>9}"
        line += f"  {vs_grpc:6.2f}"
        if size >= MIB:
            need = 5.0 if shm else 1.0
            ok = ok and vs_grpc >= need
            bars.append(f">= {need:g}x grpc: {verdict(vs_grpc >= need)}")
        print(line + ("  " + "; ".join(bars) if bars else ""))
    rdv = spread(table["BM_GrpcUcxRecv/64/real_time"], "real_time")
    print(f"  64 B Recv latency: {rdv[0]:.0f} us [{rdv[1]:.0f}-{rdv[2]:.0f}]")
    added = pss_table["BM_PssOfOneGiB/iterations:1"][0]["pss_added_MiB"]
    ok_pss = added <= PSS_BAR_MIB
    ok = ok and ok_pss
    print(f"  moving 1 GiB adds {added:.0f} MiB to the two processes' Pss together, source and"
          f" destination (bar <= {PSS_BAR_MIB}): {verdict(ok_pss)}")
    return ok


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "ucx":
        result = ucx(sys.argv[2], load(sys.argv[3]), load(sys.argv[4]), sys.argv[5])
    else:
        result = {"intra": intra, "remote": remote}[mode](load(sys.argv[2]))
    sys.exit(0 if result else 1)
