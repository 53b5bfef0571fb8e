"""rdv from Python: tensor rendezvous between processes and hosts.

A Worker is one rdv worker in this process (the C++ WorkerServer). Send
shares a C-contiguous numpy array with rdv (no copy: do not write to it
until its receiver has it); recv returns a numpy array over the received
buffer (no copy). Every wait releases the GIL; Ctrl-C cancels a waiting
recv. Failures raise rdv.Error, whose .code is one of rdv.Code.

    producer = rdv.Worker(task=0, cluster="worker=127.0.0.1:1,127.0.0.1:1",
                          protocol="grpc+ucx")
    key = rdv.create_key(producer.device(), producer.incarnation,
                         "/job:worker/replica:0/task:1/device:CPU:0", "edge")
    producer.send(1, key, numpy.arange(10.0))
"""

import asyncio
import atexit
import concurrent.futures
import enum
import weakref

from . import _rdv
from ._rdv import (DLPackTensor, Error, __version__, create_key, cuda_device_count,
                   cuda_unavailable_reason, parse_key)

__all__ = ["Code", "DLPackTensor", "Error", "Worker", "create_key", "cuda_device_count",
           "cuda_unavailable_reason", "parse_key"]


class Code(enum.IntEnum):
    """rdv's status codes (absl::StatusCode, gRPC's numbering)."""

    OK = 0
    CANCELLED = 1
    UNKNOWN = 2
    INVALID_ARGUMENT = 3
    DEADLINE_EXCEEDED = 4
    NOT_FOUND = 5
    ALREADY_EXISTS = 6
    PERMISSION_DENIED = 7
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    ABORTED = 10
    OUT_OF_RANGE = 11
    UNIMPLEMENTED = 12
    INTERNAL = 13
    UNAVAILABLE = 14
    DATA_LOSS = 15
    UNAUTHENTICATED = 16


_open_workers = weakref.WeakSet()


class _RecvFuture(concurrent.futures.Future):
    """A recv's future. cancel() withdraws the Recv at the producer first
    (one round trip at most): True when it was withdrawn, False when the
    value had already left the producer; the future then holds it, so that
    no value is lost."""

    def __init__(self):
        super().__init__()
        self._pending = None
        self._cancelling = False

    def _finished(self, error, array):
        withdrawn = getattr(error, "code", None) == Code.CANCELLED
        if error is not None and self._cancelling and withdrawn:
            super().cancel()
        elif error is not None:
            self.set_exception(error)
        else:
            self.set_result(array)

    def cancel(self):
        if self.done():
            return self.cancelled()
        self._cancelling = True
        self._pending.cancel()  # returns after _finished ran
        return self.cancelled()


class Worker(_rdv.Worker):
    """One rdv worker, serving on `listen` ("host:port"; port 0 picks one).

    Worker(task=0, cluster=None, protocol="grpc", listen="127.0.0.1:0",
           job="worker", transport_settings={}, from_environment=True)

    cluster: "job=h:p,h:p;job2=h:p" or {"job": ["h:p", ...]}, where task T
    of job J is the worker "/job:J/replica:0/task:T" (its own entry may be a
    placeholder). protocol: "grpc", "grpc+ucx" or "grpc+verbs".
    transport_settings: the plugin's settings by name (docs/configuration.md).
    from_environment: start from the RDV_* variables, as rdv-worker does.

    send(step, key, value, is_dead=False): never blocks; value is a numpy
        array or a tensor with __dlpack__ (torch, cupy: GPU memory too).
    recv(step, key, timeout=None, dlpack=False): the numpy array (None for
        a dead tensor); with dlpack=True an rdv.DLPackTensor, in GPU memory
        when the key's destination is a GPU, for torch.from_dlpack & co.
        rdv.Error DEADLINE_EXCEEDED when nothing came within timeout seconds.
    recv_async(step, key, dlpack=False): a concurrent.futures.Future of it;
        cancelling it withdraws the recv.
    arecv(step, key, dlpack=False): the same, awaitable from asyncio.
    abort(step, message): fails the step's waiting and later recvs (ABORTED).
    cleanup_step(step): aborts the step and forgets it.
    close(): stops serving; also on leaving a `with` block and at exit.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _open_workers.add(self)

    def device(self, kind="CPU", index=0):
        """This worker's device name, e.g. /job:worker/replica:0/task:0/device:CPU:0."""
        return f"{self.name}/device:{kind}:{index}"

    def recv_async(self, step, key, dlpack=False):
        future = _RecvFuture()
        future._pending = self._recv_async(step, key, dlpack, future._finished)
        return future

    async def arecv(self, step, key, dlpack=False):
        return await asyncio.wrap_future(self.recv_async(step, key, dlpack))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


@atexit.register
def _close_open_workers():
    # Before the interpreter goes: a worker's threads call back into Python.
    for worker in list(_open_workers):
        worker.close()
