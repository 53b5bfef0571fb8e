"""Two processes exchange a numpy array through rdv over grpc+ucx.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/numpy_exchange.py

This process is worker task 1 (the consumer); it starts a copy of itself as
task 0 (the producer), which sends a 1000x1000 float32 array on step 1 and
says where it listens. The consumer receives the array (the transport
writes it into the returned array's memory) and checks it. Protocol:
first argument, default grpc+ucx.
"""

import json
import subprocess
import sys

import numpy as np

import rdv

CONSUMER_DEVICE = "/job:worker/replica:0/task:1/device:CPU:0"


def expected():
    return np.arange(1_000_000, dtype=np.float32).reshape(1000, 1000)


def produce(protocol):
    with rdv.Worker(task=0, cluster="worker=127.0.0.1:1,127.0.0.1:1",
                    protocol=protocol) as worker:
        key = rdv.create_key(worker.device(), worker.incarnation, CONSUMER_DEVICE, "weights")
        worker.send(1, key, expected())
        print(json.dumps({"address": worker.address, "key": key}), flush=True)
        sys.stdin.read()  # serve until the consumer is done


def consume(protocol):
    producer = subprocess.Popen([sys.executable, __file__, protocol, "--produce"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    hello = json.loads(producer.stdout.readline())
    with rdv.Worker(task=1, cluster={"worker": [hello["address"], "127.0.0.1:1"]},
                    protocol=protocol) as worker:
        array = worker.recv(1, hello["key"], timeout=30)
    producer.stdin.close()
    producer.wait(30)
    if not np.array_equal(array, expected()):
        sys.exit("the array arrived changed")
    print(f"received a {array.dtype} array of shape {array.shape} over {protocol} "
          f"from {hello['address']}: as sent")


if __name__ == "__main__":
    chosen = sys.argv[1] if len(sys.argv) > 1 else "grpc+ucx"
    if sys.argv[-1] == "--produce":
        produce(chosen)
    else:
        consume(chosen)
