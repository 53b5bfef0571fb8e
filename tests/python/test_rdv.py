"""The Python module against real workers: this process is the consumer
(worker task 1), peer.py in a second process is the producer (task 0)."""

import asyncio
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

import arrays
import rdv

HERE = os.path.dirname(os.path.abspath(__file__))
PROTOCOLS = ["grpc", "grpc+ucx"]
# Every wait of these tests is bounded by this, so a bug fails, not hangs.
LIMIT_S = 60


class Peer:
    def __init__(self, protocol):
        self.process = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), protocol],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = json.loads(self._line())
        self.address = hello["address"]
        self.incarnation = hello["incarnation"]

    def _line(self):
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the peer exited with {self.process.wait(LIMIT_S)}")
        return line

    def command(self, **command):
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        assert self._line().strip() == "ok"

    def key(self, name, src="CPU", dst="CPU"):
        return rdv.create_key(f"/job:worker/replica:0/task:0/device:{src}:0", self.incarnation,
                              f"/job:worker/replica:0/task:1/device:{dst}:0", name)

    def stop(self):
        if self.process.poll() is None:
            self.process.stdin.close()
            self.process.wait(LIMIT_S)


@pytest.fixture(params=PROTOCOLS, scope="module")
def pair(request):
    peer = Peer(request.param)
    consumer = rdv.Worker(task=1, cluster={"worker": [peer.address, "127.0.0.1:1"]},
                          protocol=request.param)
    yield peer, consumer
    consumer.close()
    peer.stop()


_steps = iter(range(1000, 10**6))


def next_step():
    return next(_steps)


def test_keys_round_trip():
    key = rdv.create_key("/job:a/replica:0/task:0/device:CPU:0", 0x1F,
                         "/job:b/replica:0/task:2/device:GPU:1", "edge_7", frame_id=3, iter_id=4)
    parts = rdv.parse_key(key)
    assert parts == {"src_device": "/job:a/replica:0/task:0/device:CPU:0",
                     "src_incarnation": 0x1F,
                     "dst_device": "/job:b/replica:0/task:2/device:GPU:1",
                     "edge_name": "edge_7", "frame_iter": "3:4"}


def test_a_bad_key_is_an_error_with_its_code():
    with pytest.raises(rdv.Error) as error:
        rdv.parse_key("not;a;key")
    assert error.value.code == rdv.Code.INVALID_ARGUMENT
    assert error.value.code_name == "INVALID_ARGUMENT"
    assert "not;a;key" in str(error.value)


CASES = [(dtype, (3, 5)) for dtype in arrays.DTYPES] + [
    ("float32", ()), ("float32", (0, 7)), ("uint8", (1 << 20,)), ("float64", (64, 1024, 2))]


@pytest.mark.parametrize("dtype,shape", CASES)
def test_arrays_arrive_byte_exact(pair, dtype, shape):
    peer, consumer = pair
    step = next_step()
    peer.command(op="send", step=step, name="exact", dtype=dtype, shape=list(shape), seed=step)
    received = consumer.recv(step, peer.key("exact"), timeout=LIMIT_S)
    expected = arrays.make(dtype, shape, step)
    assert received.dtype == expected.dtype
    assert received.shape == expected.shape
    assert received.tobytes() == expected.tobytes()
    consumer.cleanup_step(step)


def test_a_dead_tensor_is_none(pair):
    peer, consumer = pair
    step = next_step()
    peer.command(op="dead", step=step, name="dead")
    assert consumer.recv(step, peer.key("dead"), timeout=LIMIT_S) is None


def test_recv_before_the_send_waits_for_it(pair):
    peer, consumer = pair
    step = next_step()
    future = consumer.recv_async(step, peer.key("later"))
    assert not future.done()
    peer.command(op="send", step=step, name="later", dtype="int32", shape=[4], seed=1)
    np.testing.assert_array_equal(future.result(LIMIT_S), arrays.make("int32", (4,), 1))


def test_arecv_is_awaitable(pair):
    peer, consumer = pair
    step = next_step()

    async def both():
        waiting = asyncio.ensure_future(consumer.arecv(step, peer.key("aio")))
        await asyncio.sleep(0)
        peer.command(op="send", step=step, name="aio", dtype="float32", shape=[2, 2], seed=2)
        return await asyncio.wait_for(waiting, LIMIT_S)

    np.testing.assert_array_equal(asyncio.run(both()), arrays.make("float32", (2, 2), 2))


def test_recv_times_out_and_leaves_the_value_for_the_next(pair):
    peer, consumer = pair
    step = next_step()
    started = time.monotonic()
    with pytest.raises(rdv.Error) as error:
        consumer.recv(step, peer.key("timeout"), timeout=0.3)
    assert error.value.code == rdv.Code.DEADLINE_EXCEEDED
    assert time.monotonic() - started < LIMIT_S / 2
    peer.command(op="send", step=step, name="timeout", dtype="int8", shape=[3], seed=3)
    np.testing.assert_array_equal(consumer.recv(step, peer.key("timeout"), timeout=LIMIT_S),
                                  arrays.make("int8", (3,), 3))


def test_a_cancelled_future_withdraws_its_recv(pair):
    peer, consumer = pair
    step = next_step()
    future = consumer.recv_async(step, peer.key("cancel"))
    assert future.cancel()
    peer.command(op="send", step=step, name="cancel", dtype="int16", shape=[5], seed=4)
    np.testing.assert_array_equal(consumer.recv(step, peer.key("cancel"), timeout=LIMIT_S),
                                  arrays.make("int16", (5,), 4))


def test_abort_fails_a_waiting_recv(pair):
    peer, consumer = pair
    step = next_step()
    future = consumer.recv_async(step, peer.key("abort"))
    consumer.abort(step, "stopped by the test")
    error = future.exception(LIMIT_S)
    assert isinstance(error, rdv.Error)
    assert error.code == rdv.Code.ABORTED
    assert "stopped by the test" in str(error)


def test_a_local_send_shares_the_array():
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1") as worker:
        key = rdv.create_key(worker.device(), worker.incarnation, worker.device(), "local")
        sent = np.arange(1000, dtype=np.float64)
        worker.send(1, key, sent)
        received = worker.recv(1, key, timeout=LIMIT_S)
        assert np.shares_memory(sent, received)


class DLPackOnly:
    """A tensor known only by the DLPack protocol, as torch's or cupy's."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return self.array.__dlpack__()

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()


def test_a_dlpack_tensor_is_sent_without_a_copy_and_received_as_one():
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1") as worker:
        key = rdv.create_key(worker.device(), worker.incarnation, worker.device(), "dlpack")
        sent = np.arange(24, dtype=np.int16).reshape(2, 3, 4)
        worker.send(1, key, DLPackOnly(sent))
        received = worker.recv(1, key, timeout=LIMIT_S, dlpack=True)
        assert isinstance(received, rdv.DLPackTensor)
        assert received.__dlpack_device__() == (1, 0)  # kDLCPU
        assert (received.shape, received.dtype, received.device) == ([2, 3, 4], "int16", "host")
        as_numpy = np.from_dlpack(received)
        assert np.shares_memory(sent, as_numpy)
        np.testing.assert_array_equal(as_numpy, sent)


def test_dlpack_recv_from_a_peer(pair):
    peer, consumer = pair
    step = next_step()
    peer.command(op="send", step=step, name="dl", dtype="float64", shape=[5, 6], seed=9)
    received = consumer.recv(step, peer.key("dl"), timeout=LIMIT_S, dlpack=True)
    np.testing.assert_array_equal(np.from_dlpack(received), arrays.make("float64", (5, 6), 9))
    peer.command(op="dead", step=step, name="dl_dead")
    assert consumer.recv_async(step, peer.key("dl_dead"), dlpack=True).result(LIMIT_S) is None


def needs_a_gpu():
    if rdv.cuda_device_count() == 0:
        pytest.skip(f"needs a GPU: {rdv.cuda_unavailable_reason()}")


def to_host(worker, step, name, on_gpu):
    """A CUDA DLPack tensor of `worker` as a numpy array, through rdv."""
    key = rdv.create_key(worker.device("GPU"), worker.incarnation, worker.device(), name)
    worker.send(step, key, on_gpu)
    return worker.recv(step, key, timeout=LIMIT_S)


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device_type", ctypes.c_int32),
                ("device_id", ctypes.c_int32), ("ndim", ctypes.c_int32), ("code", ctypes.c_uint8),
                ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


class ForeignCudaTensor:
    """A DLPack producer of one float on CUDA device `device` that no GPU
    backs: rdv must refuse it before touching its memory."""

    def __init__(self, device):
        self.shape = (ctypes.c_int64 * 1)(1)
        self.managed = DLManagedTensor()
        self.managed.dl_tensor = DLTensor(
            data=0x1000, device_type=2, device_id=device, ndim=1, code=2, bits=32, lanes=1,
            shape=self.shape, strides=None, byte_offset=0)
        self.device = device

    def __dlpack__(self, stream=None):
        capsule_new = ctypes.pythonapi.PyCapsule_New
        capsule_new.restype = ctypes.py_object
        capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return capsule_new(ctypes.addressof(self.managed), b"dltensor", None)

    def __dlpack_device__(self):
        return (2, self.device)


def test_a_cuda_tensor_on_a_gpu_this_process_lacks_is_refused_before_use():
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1") as worker:
        key = rdv.create_key(worker.device("GPU"), worker.incarnation, worker.device(), "absent")
        missing = rdv.cuda_device_count()
        with pytest.raises(rdv.Error, match=f"CUDA device {missing}, but this process has "
                                            f"{missing} GPUs|built without CUDA") as error:
            worker.send(1, key, ForeignCudaTensor(missing))
        assert error.value.code == rdv.Code.FAILED_PRECONDITION


def test_a_gpu_destination_gives_a_cuda_dlpack_tensor_that_rdv_sends_on():
    needs_a_gpu()
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1") as worker:
        key = rdv.create_key(worker.device(), worker.incarnation, worker.device("GPU"), "to_gpu")
        sent = arrays.make("float32", (256, 1024), 5)
        worker.send(1, key, sent)
        received = worker.recv(1, key, timeout=LIMIT_S, dlpack=True)
        assert received.__dlpack_device__() == (2, 0)  # kDLCUDA, GPU 0
        assert (received.shape, received.dtype, received.device) == ([256, 1024], "float",
                                                                     "cuda:0")
        # rdv itself as the consumer of a CUDA DLPack capsule, as for torch's.
        np.testing.assert_array_equal(to_host(worker, 1, "back", received), sent)


@pytest.mark.parametrize("src", ["CPU", "GPU"])
def test_gpu_recv_from_a_peer(pair, src):
    needs_a_gpu()
    peer, consumer = pair
    step = next_step()
    name = f"gpu_from_{src}"
    peer.command(op="send", step=step, name=name, dtype="int64", shape=[1 << 20], seed=4,
                 src=src, dst="GPU")
    received = consumer.recv(step, peer.key(name, src, "GPU"), timeout=LIMIT_S, dlpack=True)
    assert received.__dlpack_device__() == (2, 0)
    np.testing.assert_array_equal(to_host(consumer, step, name + "/back", received),
                                  arrays.make("int64", (1 << 20,), 4))
    peer.command(op="send", step=step, name=name + "/host", dtype="uint8", shape=[3, 5], seed=2,
                 src=src)
    np.testing.assert_array_equal(
        consumer.recv(step, peer.key(name + "/host", src), timeout=LIMIT_S),
        arrays.make("uint8", (3, 5), 2))


def test_bad_arguments_are_errors_that_say_what_to_do():
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1") as worker:
        key = rdv.create_key(worker.device(), worker.incarnation, worker.device(), "bad")
        with pytest.raises(rdv.Error, match="ascontiguousarray") as error:
            worker.send(1, key, np.zeros((4, 4))[:, ::2])
        assert error.value.code == rdv.Code.INVALID_ARGUMENT
        with pytest.raises(rdv.Error, match="has no rdv dtype"):
            worker.send(1, key, np.array(["text"]))
        with pytest.raises(rdv.Error, match="numpy array or a tensor with __dlpack__") as error:
            worker.send(1, key, "not an array")
        assert error.value.code == rdv.Code.INVALID_ARGUMENT
        with pytest.raises(rdv.Error, match="C-contiguous tensor") as error:
            worker.send(1, key, DLPackOnly(np.zeros((4, 4))[:, ::2]))
        assert error.value.code == rdv.Code.INVALID_ARGUMENT
    with pytest.raises(rdv.Error, match="closed") as error:
        worker.send(1, key, np.zeros(3))
    assert error.value.code == rdv.Code.FAILED_PRECONDITION
    with pytest.raises(rdv.Error) as error:
        rdv.Worker(task=0, cluster="worker=127.0.0.1:1", protocol="grpc+nonesuch")
    assert "nonesuch" in str(error.value)
    with pytest.raises(rdv.Error) as error:
        rdv.Worker(task=0, cluster=42)
    assert error.value.code == rdv.Code.INVALID_ARGUMENT


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_killed_peer_fails_the_recv_within_the_peer_timeout(protocol, monkeypatch):
    monkeypatch.setenv("RDV_PEER_TIMEOUT_MS", "1000")
    peer = Peer(protocol)
    with rdv.Worker(task=1, cluster={"worker": [peer.address, "127.0.0.1:1"]},
                    protocol=protocol) as consumer:
        future = consumer.recv_async(7, peer.key("never"))
        peer.process.kill()
        peer.process.wait(LIMIT_S)
        error = future.exception(LIMIT_S)
        assert isinstance(error, rdv.Error)
        assert error.code == rdv.Code.UNAVAILABLE


def test_ctrl_c_cancels_a_waiting_recv():
    # The signal may land just before recv starts (a loaded machine): the
    # same handler then runs, and the test still holds. Ctrl-C that does not
    # end a waiting recv hangs the child and fails the test.
    script = (
        "import numpy, rdv, sys\n"
        "w = rdv.Worker(task=0, cluster='worker=127.0.0.1:1')\n"
        "key = rdv.create_key(w.device(), w.incarnation, w.device(), 'never')\n"
        "try:\n"
        "    print('waiting', flush=True)\n"
        "    w.recv(1, key)\n"
        "except KeyboardInterrupt:\n"
        "    w.send(1, key, numpy.arange(3))\n"
        "    print('interrupted', w.recv(1, key, timeout=5).tolist(), flush=True)\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n")
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "waiting"
    child.send_signal(signal.SIGINT)
    out, _ = child.communicate(timeout=LIMIT_S)
    # The interrupted recv left its channel: the next value went to the next recv.
    assert out.strip() == "interrupted [0, 1, 2]"
    assert child.returncode == 0
