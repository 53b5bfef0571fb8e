"""rdv as a torch.distributed backend.

Importing this module registers the backend "rdv" (once per process):

    import torch.distributed as dist
    import rdv.torch
    dist.init_process_group("rdv", rank=rank, world_size=2,
                            init_method="tcp://127.0.0.1:29500")
    dist.send(torch.arange(10.0), dst=1)        # rank 0
    dist.recv(t, src=0)                         # rank 1

Each rank runs an rdv worker; the ranks exchange their addresses through
torch's store. RDV_PROTOCOL (default "grpc+ucx") picks the protocol, e.g.
"grpc" or "grpc+verbs"; RDV_LISTEN_ADDRESS (default "127.0.0.1:0") the address the
worker listens on and publishes; every other RDV_* variable applies as
for rdv-worker. send, recv, isend, irecv and barrier move dense CPU
tensors; other collectives raise and point to gloo. The group's stats()
gives its worker's counters in Prometheus' text format. See docs/torch.md.
"""

import torch.distributed as _dist

from . import _torch
from ._torch import ProcessGroupRdv

__all__ = ["BACKEND", "ProcessGroupRdv"]

BACKEND = "rdv"

if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _torch.create_process_group)
