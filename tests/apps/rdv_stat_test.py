"""rdv-stat and rdv-worker --metrics_file against a real worker: the table,
--json and --prometheus, the metrics file written before the worker says
it is ready and replaced whole, and one-line errors for a wrong address or
no address.

    rdv_stat_test.py RDV_WORKER RDV_STAT
"""
import json
import os
import signal
import subprocess
import sys
import tempfile

worker_bin, stat_bin = sys.argv[1:3]
LIMIT_S = 60
failures = []


def check(condition, what):
    if not condition:
        failures.append(what)
        print(f"FAILED: {what}", file=sys.stderr)


def stat(*args):
    return subprocess.run([stat_bin, *args], capture_output=True, text=True, timeout=LIMIT_S)


scratch = tempfile.mkdtemp()
metrics = os.path.join(scratch, "rdv.prom")
worker = subprocess.Popen(
    [worker_bin, "--cluster", "worker=127.0.0.1:1", "--task", "0", "--listen", "127.0.0.1:0",
     "--metrics_file", metrics, "--metrics_interval_s", "1"],
    stdout=subprocess.PIPE, text=True)
try:
    ready = worker.stdout.readline().split()  # rdv-worker ready NAME ADDRESS incarnation X
    check(ready[:2] == ["rdv-worker", "ready"], f"ready line: {ready}")
    address = ready[3]
    with open(metrics) as text:
        exposition = text.read()
    check("# TYPE rdv_sent_transfers_total counter" in exposition, "metrics file: no TYPE line")
    check('worker="/job:worker/replica:0/task:0"' in exposition, "metrics file: no worker label")

    table = stat(address)
    check(table.returncode == 0, f"rdv-stat: exit {table.returncode}: {table.stderr}")
    check(table.stdout.startswith("/job:worker/replica:0/task:0 (incarnation "),
          f"rdv-stat table: {table.stdout[:200]}")
    as_json = stat(address, "--json")
    check(as_json.returncode == 0, f"rdv-stat --json: exit {as_json.returncode}")
    parsed = json.loads(as_json.stdout)
    check(parsed["workerName"] == "/job:worker/replica:0/task:0", f"--json: {parsed}")
    check(any(c["name"] == "rdv_recvs_in_flight" for c in parsed["counters"]), "--json counters")
    prometheus = stat(address, "--prometheus")
    check("# TYPE rdv_recv_latency_seconds histogram" in prometheus.stdout, "--prometheus")

    for args, what in (((), "no address"), (("127.0.0.1:1",), "nobody there")):
        wrong = stat(*args)
        lines = wrong.stderr.strip().splitlines()
        check(wrong.returncode == 1 and len(lines) == 1 and lines[0].startswith("rdv-stat: "),
              f"{what}: exit {wrong.returncode}, stderr {lines}")
finally:
    worker.send_signal(signal.SIGTERM)
    code = worker.wait(LIMIT_S)
check(code == 0, f"worker exit {code}")
check(os.path.exists(metrics) and not os.path.exists(metrics + ".partial"),
      f"after the worker stopped: {os.listdir(scratch)}")
sys.exit(1 if failures else 0)
