"""A producer process for the Python tests: worker task 0 of
"worker=<itself>,<consumer>" over PROTOCOL (argv[1]). Prints
{"address", "incarnation"} as one JSON line, then reads commands, one JSON
object per line, answering each with one line:
  {"op": "send", "step": S, "name": N, "dtype": D, "shape": [..], "seed": K,
   "src": "CPU" | "GPU", "dst": "CPU" | "GPU"}
      sends arrays.make(D, shape, K) from this worker's device src (a GPU
      value is first moved there through a local Recv) to task 1's device
      dst under edge N; src and dst default to CPU; "ok"
  {"op": "dead", "step": S, "name": N}   sends a dead tensor; "ok"
Exits at end of input."""

import json
import sys

import numpy as np

import arrays
import rdv

LIMIT_S = 60


def consumer_device(kind):
    return f"/job:worker/replica:0/task:1/device:{kind}:0"


def on_gpu(worker, step, name, array):
    key = rdv.create_key(worker.device(), worker.incarnation, worker.device("GPU"), name)
    worker.send(step, key, array)
    return worker.recv(step, key, timeout=LIMIT_S, dlpack=True)


def main():
    worker = rdv.Worker(task=0, cluster="worker=127.0.0.1:1,127.0.0.1:1", protocol=sys.argv[1])
    print(json.dumps({"address": worker.address, "incarnation": worker.incarnation}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        src = command.get("src", "CPU")
        key = rdv.create_key(worker.device(src), worker.incarnation,
                             consumer_device(command.get("dst", "CPU")), command["name"])
        if command["op"] == "send":
            value = arrays.make(command["dtype"], tuple(command["shape"]), command["seed"])
            if src == "GPU":
                value = on_gpu(worker, command["step"], "to_gpu/" + command["name"], value)
            worker.send(command["step"], key, value)
        elif command["op"] == "dead":
            worker.send(command["step"], key, np.zeros(0, np.float32), is_dead=True)
        print("ok", flush=True)
    worker.close()


if __name__ == "__main__":
    main()
