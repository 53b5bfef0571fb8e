"""One rank of a torch.distributed scenario over the rdv backend, run by
test_torch_backend.py as its own process:
    ranks.py SCENARIO RANK WORLD_SIZE STORE_FILE
The protocol comes from RDV_PROTOCOL, as for any user. A rank checks what
it received itself; it prints "ok" and exits 0 when everything held."""

import datetime
import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import rdv.torch  # noqa: F401  (registers the backend)

# Every wait here is bounded, so a bug fails instead of hanging.
LIMIT = datetime.timedelta(seconds=60)

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8,
          torch.int16, torch.int32, torch.int64, torch.bool, torch.complex64, torch.complex128]
SHAPES = [(0,), (7,), (3, 4, 5), (1000, 257)]


def make(dtype, shape, seed):
    """Values of every bit pattern class the dtype has, the same on both
    ranks for the same seed."""
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(shape, dtype=torch.float64, generator=generator) * 1e3).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, generator=generator, dtype=torch.int64).to(dtype)


def expect_error(call, *fragments):
    try:
        call()
    except RuntimeError as error:
        message = str(error)
        for fragment in fragments:
            assert fragment in message, f"{fragment!r} not in {message!r}"
        return message
    raise AssertionError(f"no error; expected one with {fragments}")


def dtypes(rank):
    seed = 0
    for dtype in DTYPES:
        for shape in SHAPES:
            seed += 1
            value = make(dtype, shape, seed)
            if rank == 0:
                dist.send(value, 1, tag=seed % 3)
            else:
                received = torch.zeros(shape, dtype=dtype)
                dist.recv(received, 0, tag=seed % 3)
                assert torch.equal(received, value), (dtype, shape)
    # Non-contiguous on either side: the sender's is copied once, the
    # receiver's is filled through a contiguous copy.
    value = make(torch.float32, (64, 32), 99)
    if rank == 0:
        dist.send(value.t(), 1)
    else:
        received = torch.zeros(64, 32).t()
        assert not received.is_contiguous()
        dist.recv(received, 0)
        assert torch.equal(received, value.t())


def overlap(rank):
    sizes = [1, 1000, 65536, 17, 0, 300000, 3]
    values = [make(torch.float32, (size,), 10 + i) for i, size in enumerate(sizes)]
    if rank == 0:
        works = [dist.isend(value, 1, tag=i % 2) for i, value in enumerate(values)]
        for work in reversed(works):
            assert work.wait(LIMIT)
    else:
        received = [torch.zeros(size) for size in sizes]
        works = [dist.irecv(buffer, 0, tag=i % 2) for i, buffer in enumerate(received)]
        for work in reversed(works):
            assert work.wait(LIMIT)
            assert work.is_completed() and work.is_success()
        for got, value in zip(received, values):
            assert torch.equal(got, value)


def counter(name):
    """This rank's rdv counter `name`, from its worker's statistics."""
    stats = dist.distributed_c10d._get_default_group().stats()
    values = [float(line.split()[-1]) for line in stats.splitlines()
              if line.startswith(name + "{")]
    assert len(values) == 1, f"{name}: {values} in\n{stats}"
    return values[0]


def large(rank):
    # 1 MiB and more (these are 8 MiB) leave from memory the receiver reads itself where the
    # data plane has it (UCX_TLS naming shared memory only): a staged copy,
    # contiguous or not, that the receiver takes byte-exact; elsewhere from
    # the tensor itself. A staged send completes once its copy is handed
    # over, while the copies the receiver has not taken stay within 64 MiB
    # (PairStates::kStagedAheadBytes); any other send once the receiver has
    # the bytes.
    values = [make(torch.float32, (1024, 2048), 1), make(torch.float32, (2048, 1024), 2).t(),
              make(torch.float32, (1024, 2048), 3)]
    ahead = 8  # values of 8 MiB on tag 2, beside the first value's 8 MiB
    go = torch.zeros(1)
    if rank == 0:
        tls = os.environ.get("UCX_TLS", "")
        staged = set(tls.split(",")) <= {"posix", "cma", "self"}
        first = dist.isend(values[0], 1)
        assert first.is_completed() == staged, \
            f"isend complete before the receiver asked: {first.is_completed()} over UCX_TLS={tls}"
        more = [dist.isend(values[2], 1, tag=2) for _ in range(ahead)]
        done = [work.is_completed() for work in more]
        assert done == [staged] * (ahead - 1) + [False], f"{done} over UCX_TLS={tls}"
        dist.send(go, 1, tag=1)
        for work in [first] + more:
            assert work.wait(LIMIT)
        for value in values[1:]:
            dist.send(value, 1)
        dist.recv(go, 1, tag=3)
        # Each key's first value goes by RecvTensor, the others by the fast
        # path: lent to be read where they were staged.
        lent = counter("rdv_fast_path_values_lent_total")
        assert lent == (len(values) - 1 + ahead - 1 if staged else 0), \
            f"{lent} lent over UCX_TLS={tls}"
    else:
        dist.recv(go, 0, tag=1)
        for _ in range(ahead):
            received = torch.zeros(values[2].shape, dtype=values[2].dtype)
            dist.recv(received, 0, tag=2)
            assert torch.equal(received, values[2])
        for value in values:
            received = torch.zeros(value.shape, dtype=value.dtype)
            dist.recv(received, 0)
            assert torch.equal(received, value), value.shape
        dist.send(go, 0, tag=3)


def pingpong(rank):
    value = torch.zeros(4, dtype=torch.int64)
    for round_trip in range(1000):
        if rank == 0:
            value.fill_(round_trip)
            dist.send(value, 1)
            dist.recv(value, 1)
            assert int(value[0]) == round_trip + 1
        else:
            dist.recv(value, 0)
            assert int(value[3]) == round_trip
            value += 1
            dist.send(value, 0)


def default_protocol(rank):
    # Without RDV_PROTOCOL the group runs grpc+ucx, whose fast path carries
    # a channel's messages after its first.
    assert "RDV_PROTOCOL" not in os.environ
    protocol = dist.distributed_c10d._get_default_group().protocol
    assert protocol == "grpc+ucx", protocol
    value = torch.arange(16.0)
    for _ in range(3):
        if rank == 0:
            dist.send(value, 1)
        else:
            received = torch.empty(16)
            dist.recv(received, 0)
            assert torch.equal(received, value)
    dist.barrier()
    if rank == 1:
        assert counter("rdv_fast_path_recvs_started_total") >= 1


def pipeline(rank):
    microbatches = 8
    for i in range(microbatches):
        activations = torch.full((256, 64), float(i))
        if rank == 0:
            dist.send(activations, 1)
        elif rank == 1:
            dist.recv(activations, 0)
            dist.send(activations * 2 + 1, 2)
        else:
            dist.recv(activations, 1)
            assert torch.equal(activations, torch.full((256, 64), float(i) * 2 + 1))


def mismatch(rank):
    if rank == 0:
        dist.send(torch.ones(10), 1)
        dist.send(torch.arange(4.0), 1)
    else:
        expect_error(lambda: dist.recv(torch.zeros(5), 0), "the sender sent float [10] (40 bytes)",
                     "the receiving tensor is float [5] (20 bytes)")
        after = torch.zeros(4)
        dist.recv(after, 0)
        assert torch.equal(after, torch.arange(4.0))


def misuse(rank):
    expect_error(lambda: dist.all_reduce(torch.ones(2)), "all_reduce", "gloo")
    expect_error(lambda: dist.broadcast(torch.ones(2), 0), "broadcast", "gloo")
    expect_error(lambda: dist.recv(torch.ones(2)), "src=")
    expect_error(lambda: dist.send(torch.ones(2), rank), "is not another rank")
    if rank == 1:
        # A recv with nothing sent: wait() with a timeout says so, and the
        # recv stays pending; the next value on the tag still lands in it.
        waiting = torch.zeros(3)
        work = dist.irecv(waiting, 0, tag=7)
        expect_error(lambda: work.wait(datetime.timedelta(milliseconds=200)),
                     "recv of tag 7 from rank 0 did not complete within 200 ms")
    dist.barrier()
    if rank == 0:
        dist.send(torch.full((3,), 7.0), 1, tag=7)
    else:
        assert work.wait(LIMIT)
        assert torch.equal(waiting, torch.full((3,), 7.0))


def groups(rank):
    """A subgroup over rdv beside a gloo group for the collectives."""
    pair = dist.new_group([1, 2])
    gloo = dist.new_group(backend="gloo")
    if rank == 1:
        dist.send(torch.arange(4.0), 2, group=pair)
    elif rank == 2:
        received = torch.zeros(4)
        dist.recv(received, 1, group=pair)
        assert torch.equal(received, torch.arange(4.0))
    total = torch.full((2,), float(rank))
    dist.all_reduce(total, group=gloo)
    assert torch.equal(total, torch.full((2,), 3.0))


def barrier(rank):
    for _ in range(20):
        dist.barrier()


def killed_peer(rank):
    # Rank 0 dies once every rank is past the handshake (a barrier's
    # release could still be on its way to them).
    if rank == 0:
        for peer in range(1, dist.get_world_size()):
            dist.recv(torch.zeros(1), peer)
        os.kill(os.getpid(), signal.SIGKILL)
    dist.send(torch.ones(1), 0)
    pending_recv = dist.irecv(torch.zeros(8), 0)
    start = time.monotonic()
    expect_error(lambda: pending_recv.wait(LIMIT), "recv of tag 0 from rank 0 failed",
                 "UNAVAILABLE")
    elapsed_ms = (time.monotonic() - start) * 1000
    limit_ms = int(os.environ["RDV_PEER_TIMEOUT_MS"]) + 3000
    assert elapsed_ms < limit_ms, f"noticed after {elapsed_ms:.0f} ms"
    expect_error(lambda: dist.send(torch.ones(8), 0), "send of tag 0 to rank 0 failed",
                 "rank 0 was lost")
    if dist.get_world_size() > 2:
        # The other pairs go on.
        dist.send(torch.ones(2), 2) if rank == 1 else dist.recv(torch.ones(2), 1)


SCENARIOS = {name: function for name, function in globals().items()
             if callable(function) and name in
             {"dtypes", "overlap", "pingpong", "pipeline", "mismatch", "misuse", "barrier",
              "killed_peer", "groups", "large", "default_protocol"}}


def main():
    scenario, rank, world_size, store_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    dist.init_process_group("rdv", rank=rank, world_size=world_size,
                            init_method=f"file://{store_file}", timeout=LIMIT)
    SCENARIOS[scenario](rank)
    dist.destroy_process_group()
    print("ok", flush=True)


if __name__ == "__main__":
    main()
