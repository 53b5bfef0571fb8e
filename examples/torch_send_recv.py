"""Two processes move a tensor with torch.distributed over the rdv backend.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/torch_send_recv.py

Rank 0 (this process) starts rank 1 as a copy of itself; both join the
group "rdv" through a FileStore in a scratch directory. Rank 0 sends a
1000x1000 float32 tensor, rank 1 receives it into its own tensor, checks it
and sends back its sum. Protocol: first argument (RDV_PROTOCOL), default
grpc+ucx.
"""

import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

import rdv.torch  # noqa: F401  (registers the backend "rdv")


def expected():
    return torch.arange(1_000_000, dtype=torch.float32).reshape(1000, 1000)


def run(rank, store):
    dist.init_process_group("rdv", rank=rank, world_size=2, init_method=f"file://{store}")
    if rank == 0:
        dist.send(expected(), dst=1)
        total = torch.zeros((), dtype=torch.float64)
        dist.recv(total, src=1)
        group = dist.distributed_c10d._get_default_group()
        print(f"rank 1 received a float32 tensor of shape (1000, 1000) over {group.protocol}: "
              f"{'as sent' if total.item() == expected().double().sum().item() else 'CORRUPT'}")
    else:
        received = torch.empty(1000, 1000)
        dist.recv(received, src=0)
        assert torch.equal(received, expected())
        dist.send(received.double().sum(), dst=0)
    dist.destroy_process_group()


def main():
    if len(sys.argv) > 2 and sys.argv[1] == "--rank":
        return run(int(sys.argv[2]), sys.argv[3])
    os.environ.setdefault("RDV_PROTOCOL", sys.argv[1] if len(sys.argv) > 1 else "grpc+ucx")
    with tempfile.TemporaryDirectory() as scratch:
        store = os.path.join(scratch, "store")
        peer = subprocess.Popen([sys.executable, __file__, "--rank", "1", store])
        run(0, store)
        if peer.wait(timeout=120) != 0:
            sys.exit(f"rank 1 exited with {peer.returncode}")


if __name__ == "__main__":
    main()
