#!/usr/bin/env python3
"""rdv-bench compare: every protocol rdv speaks on this machine, measured
beside its peers in one run, between two processes on loopback.

Subjects, interleaved repetition by repetition so that they share the
machine's moods: rdv:grpc and the raw gRPC reference (a bytes payload in a
unary call on a channel with the same settings); for each UCX_TLS setting,
rdv:grpc+ucx with recurring keys (every Recv the next value of one key, a
training loop's steady state) and with first-time keys (every Recv of a new
key), and ucx_perftest (put, get and tag bandwidth, tag latency); over
shared memory also the default before it lent mapped values to be read
(RDV_UCX_MEMORY=anonymous: every value sent tagged, recurring keys,
reported without a verdict);
rdv:grpc+verbs when an RDMA device is present. Apart, at 64 B: the
recurring Recv's p50 latency with the UCX progress thread in its default
mode (wait) and polling, beside the raw gRPC round trip and ucx_perftest's
tag latency. Prints medians [min-max]
and the ratios rdv / best peer with each target's verdict, optionally
writes --json (one row per subject, transport setting and size) and --plot
(PNG, gnuplot). Exits 0 when every measurement ran, whatever the verdicts
(a machine may simply be slower than the targets assume); with --check, 1
when a target is missed (for CI and scripts).

In the 64 B table each pair of processes (rdv's consumer and producer, raw
gRPC's client and server, ucx_perftest's client and server) runs pinned,
one process per CPU, as ucx_perftest -c pins (rdv-bench --cpu and
--peer_cpu). Left to the scheduler on a 2-CPU machine, the busy threads of
a pair land in different places from run to run, and a 64 B Recv takes 10
or 50 us (docs/fast_path.md). The bandwidth tables run unpinned, as all
their earlier figures were: pinned, they moved within the same spread
here. --pin all|none changes that.

Run it as `rdv-bench compare [options]`."""
import argparse
import contextlib
import datetime
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ucx_perftest  # noqa: E402  (beside this file)

PERFTEST_BW = ["ucp_put_bw", "ucp_get", "tag_bw"]
# Where results of first-time keys are kept: "rdv:grpc+ucx" + FIRST_KEYS.
FIRST_KEYS = "@first"
TARGET_SHM = "posix,cma,self"
# The bandwidth targets of grpc+ucx with recurring keys (issue 19): (size,
# the UCX_TLS settings it applies to, the peer, the least ratio to it). The
# peer "perftest" is the best ucx_perftest figure under the same setting,
# "rdv:grpc" protocol grpc in the same run.
BANDWIDTH_TARGETS = (
    (64 << 10, ("tcp", TARGET_SHM), "rdv:grpc", 2.0),
    (1 << 20, ("tcp", TARGET_SHM), "perftest", 0.5),
    (1 << 20, (TARGET_SHM,), "rdv:grpc", 5.0),
    (64 << 20, ("tcp", TARGET_SHM), "perftest", 0.9),
    (64 << 20, (TARGET_SHM,), "rdv:grpc", 5.0),
)
# The small-message latency table: its results are kept under subject +
# LATENCY. The target, a recurring Recv within 0.2x of the raw gRPC unary
# round trip, applies to the default progress mode (the first); polling is
# reported beside it: two spinning progress threads and the callers share
# a small machine's cores, so it is not the faster mode everywhere.
LATENCY = "@latency"
# Over shared memory only, the default pool is mapped and the consumer
# reads each value of 256 KiB and more from the producer's segment (design
# D, docs/fast_path.md). The default before, every value sent tagged from
# anonymous memory, is measured beside it with recurring keys; reported, no
# verdict (the bars apply to the defaults).
TAGGED_ANONYMOUS = {"RDV_UCX_MEMORY": "anonymous"}
SHARED_MEMORY_TLS = {"posix", "sysv", "sm", "shm", "mm", "cma", "self"}
LATENCY_SIZE = 64
TARGET_LATENCY_VS_RAW = 0.2
PROGRESS_MODES = ("wait", "poll")


def parse_size(text):
    scale = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1].upper(), 1)
    return int(text[:-1] if scale != 1 else text) * scale


def rdma_device():
    devices = sorted(os.listdir("/sys/class/infiniband")) if os.path.isdir(
        "/sys/class/infiniband") else []
    return devices[0] if devices else None


class Results:
    """Per (subject, transport_env, size): lists of bandwidth and latency."""

    def __init__(self):
        self.bw, self.p50, self.p99 = {}, {}, {}

    def add(self, subject, env, size, bw, p50=None, p99=None):
        key = (subject, env, size)
        self.bw.setdefault(key, []).append(bw)
        if p50 is not None:
            self.p50.setdefault(key, []).append(p50)
            self.p99.setdefault(key, []).append(p99)

    def median(self, subject, env, size):
        values = self.bw.get((subject, env, size))
        return statistics.median(values) if values else None

    def rows(self):
        rows = []
        for (subject, env, size), bw in sorted(self.bw.items()):
            p50 = self.p50.get((subject, env, size))
            p99 = self.p99.get((subject, env, size))
            name = subject.replace(FIRST_KEYS, "").replace(LATENCY, "")
            keys = ("first" if FIRST_KEYS in subject
                    else "recurring" if name.startswith("rdv:") else None)
            rows.append({
                "subject": name, "transport_env": env, "keys": keys,
                "table": "latency" if LATENCY in subject else "sizes", "size_bytes": size,
                "repetitions": len(bw), "bw_GBps_median": statistics.median(bw),
                "bw_GBps_min": min(bw), "bw_GBps_max": max(bw),
                "lat_us_p50": statistics.median(p50) if p50 else None,
                "lat_us_p99": statistics.median(p99) if p99 else None})
        return rows


def run_rdv_bench(rdv_bench, sizes, protocol, env, subject="rdv", keys="recurring", cpus=None):
    pin = ["--cpu", str(cpus[0]), "--peer_cpu", str(cpus[1])] if cpus else []
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        result = subprocess.run(
            [rdv_bench, "--local", "--protocol", protocol, "--subject", subject,
             "--sizes", ",".join(map(str, sizes)), "--keys", keys, "--json", out.name] + pin,
            env=dict(os.environ, **env), capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise SystemExit(f"rdv-bench {protocol} {env} failed: {result.stderr.strip()}")
        return json.load(open(out.name))


def shared_memory_only(tls):
    return set(tls.split(",")) <= SHARED_MEMORY_TLS


def tagged_anonymous_label(tls):
    return f"UCX_TLS={tls} " + " ".join(f"{k}={v}" for k, v in TAGGED_ANONYMOUS.items())


@contextlib.contextmanager
def ucx_tls(tls):
    """UCX_TLS=tls for the ucx_perftest runs inside, then as it was."""
    before = os.environ.get("UCX_TLS")
    os.environ["UCX_TLS"] = tls
    try:
        yield
    finally:
        if before is None:
            del os.environ["UCX_TLS"]
        else:
            os.environ["UCX_TLS"] = before


def perftest_latency_us(size, cpus):
    """ucx_perftest tag_lat: the median one-way latency in microseconds."""
    return float(ucx_perftest.final_fields("tag_lat", size, cpus)[2])


def measure(args, sizes, settings, results):
    verbs = rdma_device()
    for repetition in range(args.repetitions):
        print(f"  repetition {repetition + 1} of {args.repetitions}", file=sys.stderr, flush=True)
        for row in run_rdv_bench(args.rdv_bench, sizes, "grpc", {}, cpus=args.bandwidth_cpus):
            results.add("rdv:grpc", "", row["size_bytes"], row["bw_GBps_avg"],
                        row["lat_us_p50"], row["lat_us_p99"])
        for row in run_rdv_bench(args.rdv_bench, sizes, "grpc", {}, subject="grpc-raw",
                                 cpus=args.bandwidth_cpus):
            results.add("grpc-raw", "", row["size_bytes"], row["bw_GBps_avg"],
                        row["lat_us_p50"], row["lat_us_p99"])
        for tls in settings:
            env = {"UCX_TLS": tls}
            label = f"UCX_TLS={tls}"
            for keys, subject in (("recurring", "rdv:grpc+ucx"),
                                  ("first", "rdv:grpc+ucx" + FIRST_KEYS)):
                for row in run_rdv_bench(args.rdv_bench, sizes, "grpc+ucx", env, keys=keys,
                                         cpus=args.bandwidth_cpus):
                    results.add(subject, label, row["size_bytes"], row["bw_GBps_avg"],
                                row["lat_us_p50"], row["lat_us_p99"])
            if shared_memory_only(tls):
                for row in run_rdv_bench(args.rdv_bench, sizes, "grpc+ucx",
                                         dict(env, **TAGGED_ANONYMOUS),
                                         cpus=args.bandwidth_cpus):
                    results.add("rdv:grpc+ucx", tagged_anonymous_label(tls), row["size_bytes"],
                                row["bw_GBps_avg"], row["lat_us_p50"], row["lat_us_p99"])
            with ucx_tls(tls):
                for size in sizes:
                    for test in PERFTEST_BW:
                        results.add(f"ucx_perftest:{test}", label, size,
                                    ucx_perftest.run_once(test, size, args.bandwidth_cpus))
                    latency = perftest_latency_us(size, args.bandwidth_cpus)
                    results.add("ucx_perftest:tag_lat", label, size, size / latency / 1e3,
                                latency, latency)
        measure_latency(args, settings, results)
        if verbs:
            env = {"RDV_IB_DEVICE": verbs}
            for row in run_rdv_bench(args.rdv_bench, sizes, "grpc+verbs", env,
                                     cpus=args.bandwidth_cpus):
                results.add("rdv:grpc+verbs", f"RDV_IB_DEVICE={verbs}", row["size_bytes"],
                            row["bw_GBps_avg"], row["lat_us_p50"], row["lat_us_p99"])


def measure_latency(args, settings, results):
    """One repetition of the 64 B table: raw gRPC, then per UCX_TLS the
    recurring Recv in each progress mode and ucx_perftest's tag latency."""
    size = LATENCY_SIZE
    for row in run_rdv_bench(args.rdv_bench, [size], "grpc", {}, subject="grpc-raw",
                             cpus=args.latency_cpus):
        results.add("grpc-raw" + LATENCY, "", size, row["bw_GBps_avg"], row["lat_us_p50"],
                    row["lat_us_p99"])
    for tls in settings:
        for progress in PROGRESS_MODES:
            env = {"UCX_TLS": tls, "RDV_UCX_PROGRESS": progress}
            for row in run_rdv_bench(args.rdv_bench, [size], "grpc+ucx", env,
                                     cpus=args.latency_cpus):
                results.add("rdv:grpc+ucx" + LATENCY, latency_label(tls, progress), size,
                            row["bw_GBps_avg"], row["lat_us_p50"], row["lat_us_p99"])
        with ucx_tls(tls):
            latency = perftest_latency_us(size, args.latency_cpus)
        results.add("ucx_perftest:tag_lat" + LATENCY, f"UCX_TLS={tls}", size,
                    size / latency / 1e3, latency, latency)


def latency_label(tls, progress):
    return f"UCX_TLS={tls} RDV_UCX_PROGRESS={progress}"


def report_latency(results, settings):
    """The 64 B table; returns the targets missed."""
    missed = []
    size = LATENCY_SIZE
    raw = statistics.median(results.p50[("grpc-raw" + LATENCY, "", size)])
    raw_mean = mean_us(results, "grpc-raw" + LATENCY, "", size)
    print(f"\n{size} B Recv of a recurring key, p50 in us (median of repetitions); raw gRPC "
          f"unary round trip {raw:.1f} us (mean {raw_mean:.1f}); target <= "
          f"{TARGET_LATENCY_VS_RAW}x raw gRPC. The mean is the time per Recv over the stream, "
          f"its tail included")
    print(f"{'UCX_TLS':>16}  {'progress':>8}  {'rdv p50':>8}  {'/raw gRPC':>9}  "
          f"{'rdv mean':>8}  {'ucx_perftest tag_lat':>20}  verdict")
    for tls in settings:
        tag = statistics.median(results.p50[("ucx_perftest:tag_lat" + LATENCY, f"UCX_TLS={tls}",
                                             size)])
        for progress in PROGRESS_MODES:
            p50 = statistics.median(results.p50[("rdv:grpc+ucx" + LATENCY,
                                                 latency_label(tls, progress), size)])
            verdict = "reported"
            if progress == PROGRESS_MODES[0]:
                met = p50 / raw <= TARGET_LATENCY_VS_RAW
                verdict = "met" if met else "missed"
                if not met:
                    missed.append(f"<= {TARGET_LATENCY_VS_RAW}x the raw gRPC round trip at "
                                  f"{size} B over UCX_TLS={tls} ({p50 / raw:.2f}x)")
            mean = mean_us(results, "rdv:grpc+ucx" + LATENCY, latency_label(tls, progress), size)
            print(f"{tls:>16}  {progress:>8}  {p50:8.1f}  {p50 / raw:9.2f}  {mean:8.1f}  "
                  f"{tag:20.2f}  {verdict}")
    return missed


def mean_us(results, subject, env, size):
    """The time per Recv in us: the size over the median average bandwidth."""
    return size / results.median(subject, env, size) / 1e3


def cell(results, subject, env, size):
    values = results.bw.get((subject, env, size))
    if not values:
        return "-"
    return f"{statistics.median(values):.3f} [{min(values):.3f}-{max(values):.3f}]"


def report(results, sizes, settings):
    missed = []
    print("\nrdv:grpc beside raw gRPC (GB/s, median [min-max]; latency p50 in us)")
    print(f"{'size':>10}  {'rdv:grpc':>24}  {'grpc-raw':>24}  {'ratio':>6}  "
          f"{'p50 rdv':>9}  {'p50 raw':>9}")
    for size in sizes:
        rdv, raw = results.median("rdv:grpc", "", size), results.median("grpc-raw", "", size)
        p50 = statistics.median(results.p50[("rdv:grpc", "", size)])
        p50_raw = statistics.median(results.p50[("grpc-raw", "", size)])
        print(f"{size:>10}  {cell(results, 'rdv:grpc', '', size):>24}  "
              f"{cell(results, 'grpc-raw', '', size):>24}  {rdv / raw:6.2f}  "
              f"{p50:9.1f}  {p50_raw:9.1f}")
    for tls in settings:
        label = f"UCX_TLS={tls}"
        print(f"\nrdv:grpc+ucx, {label} (GB/s, median [min-max]; ratios of medians)")
        print(f"{'size':>10}  {'rdv:grpc+ucx':>24}  {'best ucx_perftest':>34}  {'/best':>6}  "
              f"{'/rdv:grpc':>9}")
        for size in sizes:
            ucx = results.median("rdv:grpc+ucx", label, size)
            best = max(PERFTEST_BW, key=lambda t: results.median(f"ucx_perftest:{t}", label, size))
            best_bw = results.median(f"ucx_perftest:{best}", label, size)
            grpc = results.median("rdv:grpc", "", size)
            ratios = {"perftest": ucx / best_bw, "rdv:grpc": ucx / grpc}
            verdict = ""
            for target_size, tls_set, peer, target in BANDWIDTH_TARGETS:
                if size != target_size or tls not in tls_set:
                    continue
                name = "the best ucx_perftest" if peer == "perftest" else peer
                met = ratios[peer] >= target
                verdict += f"  >= {target}x {name}: {'met' if met else 'missed'}"
                if not met:
                    missed.append(f">= {target}x {name} at {size} B over {label} "
                                  f"({ratios[peer]:.2f}x)")
            best_cell = f"{best} {cell(results, f'ucx_perftest:{best}', label, size)}"
            print(f"{size:>10}  {cell(results, 'rdv:grpc+ucx', label, size):>24}  "
                  f"{best_cell:>34}  {ucx / best_bw:6.2f}  {ucx / grpc:9.2f}{verdict}")
    for tls in settings:
        label = f"UCX_TLS={tls}"
        first = "rdv:grpc+ucx" + FIRST_KEYS
        print(f"\nrdv:grpc+ucx, {label}: recurring keys (the fast path) beside first-time "
              f"keys (RecvTensor each); p50 in us, bandwidth in GB/s")
        print(f"{'size':>10}  {'p50 recurring':>14}  {'p50 first':>10}  {'ratio':>6}  "
              f"{'GB/s recurring':>15}  {'GB/s first':>11}")
        for size in sizes:
            p50 = statistics.median(results.p50[("rdv:grpc+ucx", label, size)])
            p50_first = statistics.median(results.p50[(first, label, size)])
            print(f"{size:>10}  {p50:14.1f}  {p50_first:10.1f}  {p50 / p50_first:6.2f}  "
                  f"{results.median('rdv:grpc+ucx', label, size):15.3f}  "
                  f"{results.median(first, label, size):11.3f}")
    report_tagged_anonymous(results, sizes, settings)
    missed += report_latency(results, settings)
    verbs = [key for key in results.bw if key[0] == "rdv:grpc+verbs"]
    if verbs:
        env = verbs[0][1]
        print(f"\nrdv:grpc+verbs, {env} (GB/s): " + ", ".join(
            f"{size}: {cell(results, 'rdv:grpc+verbs', env, size)}" for size in sizes))
    return missed


def plot(results, path):
    """Bandwidth against size, one line per subject and setting (gnuplot)."""
    series = sorted({(subject, env) for subject, env, _ in results.bw
                     if subject != "ucx_perftest:tag_lat" and LATENCY not in subject})
    data = path + ".dat"
    with open(data, "w") as out:
        for subject, env in series:
            for (s, e, size), _ in sorted(results.bw.items()):
                if (s, e) == (subject, env):
                    out.write(f"{size} {results.median(s, e, size)}\n")
            out.write("\n\n")
    # rdv's lines solid, the peers' dashed.
    plots = ", ".join(
        f"'{data}' index {i} using 1:2 with linespoints "
        f"dashtype {1 if s.startswith('rdv:') else 2} "
        f"title '{s.replace(FIRST_KEYS, ' first-time keys')} {e}'"
        for i, (s, e) in enumerate(series))
    title = (f"rdv-bench compare, two processes on loopback: {os.uname().nodename}, "
             f"{os.cpu_count()} CPUs, {datetime.date.today().isoformat()}")
    script = (f"set terminal pngcairo noenhanced size 1200,700; set output '{path}'; "
              f"set logscale xy 2; set key below; set grid; "
              f"set format x '%.0b%BB'; set xlabel 'message size (bytes, log scale)'; "
              f"set ylabel 'bandwidth, GB/s (median of repetitions, log scale)'; "
              f"set title '{title}'; plot {plots}")
    if subprocess.run(["gnuplot", "-e", script]).returncode != 0:
        raise SystemExit("--plot: gnuplot failed (scripts/setup installs gnuplot-nox)")


def report_tagged_anonymous(results, sizes, settings):
    for tls in filter(shared_memory_only, settings):
        label, default = tagged_anonymous_label(tls), f"UCX_TLS={tls}"
        print(f"\nrdv:grpc+ucx, {label}: every value sent tagged, the default before mapped "
              f"values were lent to be read (GB/s, median [min-max]; recurring keys; no verdict)")
        print(f"{'size':>10}  {'tagged':>24}  {'default':>8}  {'default/tagged':>14}")
        for size in sizes:
            tagged = results.median("rdv:grpc+ucx", label, size)
            plain = results.median("rdv:grpc+ucx", default, size)
            print(f"{size:>10}  {cell(results, 'rdv:grpc+ucx', label, size):>24}  {plain:8.3f}  "
                  f"{plain / tagged:14.2f}")


def placement(args):
    pinned = {"latency": "the 64 B table", "all": "every measurement"}.get(args.pin)
    if pinned and args.latency_cpus:
        first, second = args.latency_cpus
        return (f"pinned for {pinned}: rdv's consumer, raw gRPC's client and ucx_perftest's "
                f"client on CPU {first}, the other process of each pair on CPU {second}")
    return "every process unpinned: the scheduler places their threads"


def main():
    parser = argparse.ArgumentParser(prog="rdv-bench compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rdv-bench", required=True, help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default="64K,1M,16M,64M", help="comma-separated sizes")
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--ucx-tls", default=f"tcp;{TARGET_SHM}",
                        help="';'-separated UCX_TLS settings to compare under")
    parser.add_argument("--json", help="write one row per subject, setting and size")
    parser.add_argument("--plot", help="draw bandwidth against size to this PNG")
    parser.add_argument("--pin", choices=("latency", "all", "none"), default="latency",
                        help="which measurements run each process of a pair on a CPU of its "
                             "own, peers and rdv alike: the 64 B table (the default), all, or "
                             "none")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 when a target is missed (default: report it, exit 0)")
    args = parser.parse_args()
    sizes = [parse_size(s) for s in args.sizes.split(",")]
    settings = [s for s in args.ucx_tls.split(";") if s]
    cpus = sorted(os.sched_getaffinity(0))
    pair = (cpus[0], cpus[1]) if len(cpus) >= 2 else None
    args.latency_cpus = pair if args.pin in ("latency", "all") else None
    args.bandwidth_cpus = pair if args.pin == "all" else None
    print(placement(args), flush=True)
    results = Results()
    measure(args, sizes, settings, results)
    missed = report(results, sizes, settings)
    if args.json:
        with open(args.json, "w") as out:
            json.dump(results.rows(), out, indent=1)
        print(f"\nrows: {args.json}")
    if args.plot:
        plot(results, args.plot)
        print(f"plot: {args.plot}")
    if missed:
        print("targets missed on this machine: " + "; ".join(missed))
    sys.exit(1 if missed and args.check else 0)


if __name__ == "__main__":
    main()
