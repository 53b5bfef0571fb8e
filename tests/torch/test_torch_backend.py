"""torch.distributed over the rdv backend: each scenario of ranks.py runs as
real rank processes (one per rank) that find each other through a
FileStore, over every protocol this machine has."""

import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = ["grpc", "grpc+ucx"]
# Every rank process must finish within this, so a bug fails, not hangs.
LIMIT_S = 120


def run_ranks(scenario, world_size, protocol, tmp_path, environment=None):
    """`protocol` None: RDV_PROTOCOL unset, the backend's default."""
    env = dict(os.environ, **(environment or {}))
    env.pop("RDV_PROTOCOL", None)
    if protocol is not None:
        env["RDV_PROTOCOL"] = protocol
    store = tmp_path / "store"
    ranks = [subprocess.Popen([sys.executable, os.path.join(HERE, "ranks.py"), scenario,
                               str(rank), str(world_size), str(store)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for rank in range(world_size)]
    results = []
    for rank in ranks:
        try:
            out, err = rank.communicate(timeout=LIMIT_S)
        except subprocess.TimeoutExpired:
            for other in ranks:
                other.kill()
            out, err = rank.communicate()
        results.append((rank.returncode, out, err))
    return results


def assert_ok(results, skip=()):
    for rank, (code, out, err) in enumerate(results):
        if rank in skip:
            continue
        assert code == 0 and out.strip() == "ok", f"rank {rank} exited {code}:\n{out}\n{err}"


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("scenario", ["dtypes", "overlap", "pingpong", "mismatch", "misuse",
                                      "barrier"])
def test_two_ranks(scenario, protocol, tmp_path):
    assert_ok(run_ranks(scenario, 2, protocol, tmp_path))


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("scenario", ["pipeline", "groups"])
def test_three_ranks(scenario, protocol, tmp_path):
    assert_ok(run_ranks(scenario, 3, protocol, tmp_path))


def test_the_default_protocol_is_grpc_ucx(tmp_path):
    assert_ok(run_ranks("default_protocol", 2, None, tmp_path))


def test_a_default_protocol_that_cannot_start_says_how_to_choose_another(tmp_path):
    [(code, out, err)] = run_ranks("default_protocol", 1, None, tmp_path, {"UCX_TLS": "bogus"})
    assert code != 0 and out.strip() != "ok", (code, out, err)
    assert ("could not start its worker (RDV_PROTOCOL=grpc+ucx, the default; "
            "RDV_PROTOCOL=grpc needs no data plane)") in err, err
    assert "UCX_TLS" in err, err


@pytest.mark.parametrize("tls", ["posix,cma,self", "tcp"])
def test_large_sends_staged_only_where_the_receiver_reads_them(tls, tmp_path):
    assert_ok(run_ranks("large", 2, "grpc+ucx", tmp_path, {"UCX_TLS": tls}))


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_killed_peer_fails_its_work_only(protocol, tmp_path):
    results = run_ranks("killed_peer", 3, protocol, tmp_path, {"RDV_PEER_TIMEOUT_MS": "2000"})
    assert results[0][0] == -signal.SIGKILL, results[0]
    assert_ok(results, skip={0})


def test_the_backend_is_registered():
    import torch.distributed as dist
    import rdv.torch
    assert rdv.torch.BACKEND == "rdv"
    assert dist.Backend.RDV == "RDV"


def test_the_benchmark_reports_every_backend_against_gloo():
    bench = os.path.join(HERE, "..", "..", "bench", "torch_bench.py")
    run = subprocess.run([sys.executable, bench, "--rounds", "1", "--pin", "--sizes", "64,1K",
                          "--backends", "gloo,grpc+ucx:shm"],
                         capture_output=True, text=True, timeout=LIMIT_S)
    assert run.returncode == 0, run.stderr
    rows = [line.split() for line in run.stdout.splitlines()[1:]]
    assert [(row[0], row[1] + row[2]) for row in rows] == [
        ("gloo", "64B"), ("gloo", "1KiB"), ("grpc+ucx:shm", "64B"), ("grpc+ucx:shm", "1KiB")]
    assert all(row[-1].endswith("x") for row in rows[2:]), run.stdout
    assert "round 1/1 grpc+ucx:shm: 64 B " in run.stderr, run.stderr
