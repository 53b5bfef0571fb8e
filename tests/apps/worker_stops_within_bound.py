#!/usr/bin/env python3
"""A worker asked to stop exits within RDV_SHUTDOWN_TIMEOUT_MS, even while a
step is stuck on a producer that neither answers nor counts as lost yet.

Two rdv-workers run examples/large_edge.json (256 MiB from task 0 to task 1
each step, forced gets over shared memory: the transfer needs the
producer's progress) under rdv-run; task 0 is stopped (SIGSTOP) at a
different moment of each trial, with a peer timeout of a minute, and task 1
is asked to stop (SIGTERM). It must be gone within the shutdown bound plus
slack, every trial.

usage: worker_stops_within_bound.py RDV_WORKER RDV_RUN EXAMPLES_DIR"""
import os
import signal
import socket
import subprocess
import sys
import time

worker, run, examples = sys.argv[1:4]
SHUTDOWN_MS = 2000
SLACK_S = 3.0
TRIALS = 5


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def wait_ready(process, limit=60):
    deadline = time.monotonic() + limit
    line = process.stdout.readline()
    if not line.startswith("rdv-worker ready") or time.monotonic() > deadline:
        sys.exit(f"FAIL: a worker never got ready: {line!r}")


env = dict(os.environ, RDV_PEER_TIMEOUT_MS="60000", RDV_SHUTDOWN_TIMEOUT_MS=str(SHUTDOWN_MS),
           RDV_UCX_OP="get", UCX_TLS="posix,cma,self")
failures = []
for trial in range(TRIALS):
    ports = free_ports(2)
    cluster = f"worker=127.0.0.1:{ports[0]},127.0.0.1:{ports[1]}"
    workers = [subprocess.Popen([worker, "--task", str(task), "--cluster", cluster,
                                 "--protocol", "grpc+ucx"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
               for task in (0, 1)]
    for w in workers:
        wait_ready(w)
    runner = subprocess.Popen([run, "--cluster", cluster, "--graph",
                               os.path.join(examples, "large_edge.json"), "--fetch", "total:0",
                               "--steps", "1000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    # The step is in flight somewhere different each trial.
    time.sleep(1.0 + 0.13 * trial)
    workers[0].send_signal(signal.SIGSTOP)
    time.sleep(0.3)
    asked = time.monotonic()
    workers[1].send_signal(signal.SIGTERM)
    try:
        status = workers[1].wait(timeout=SHUTDOWN_MS / 1000 + SLACK_S)
        took = time.monotonic() - asked
        print(f"trial {trial}: exited with status {status} after {took:.2f} s")
    except subprocess.TimeoutExpired:
        failures.append(f"trial {trial}: task 1 still running "
                        f"{SHUTDOWN_MS / 1000 + SLACK_S:.1f} s after SIGTERM")
        workers[1].kill()
        workers[1].wait()
    for process in (runner, workers[0]):
        process.kill()
        process.wait()
    for w in workers:
        w.stdout.close()
        w.stderr.close()

for failure in failures:
    print("FAIL:", failure, file=sys.stderr)
sys.exit(1 if failures else 0)
