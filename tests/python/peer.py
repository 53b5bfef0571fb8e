"""A producer process for the Python tests: worker task 0 of
"worker=<itself>,<consumer>" over PROTOCOL (argv[1]). Prints
{"address", "incarnation"} as one JSON line, then reads commands, one JSON
object per line, answering each with one line:
  {"op": "send", "step": S, "name": N, "dtype": D, "shape": [..], "seed": K}
      sends arrays.make(D, shape, K) to task 1's CPU under edge N; "ok"
  {"op": "dead", "step": S, "name": N}   sends a dead tensor; "ok"
Exits at end of input."""

import json
import sys

import numpy as np

import arrays
import rdv

CONSUMER_DEVICE = "/job:worker/replica:0/task:1/device:CPU:0"


def main():
    worker = rdv.Worker(task=0, cluster="worker=127.0.0.1:1,127.0.0.1:1", protocol=sys.argv[1])
    print(json.dumps({"address": worker.address, "incarnation": worker.incarnation}), flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        key = rdv.create_key(worker.device(), worker.incarnation, CONSUMER_DEVICE, command["name"])
        if command["op"] == "send":
            array = arrays.make(command["dtype"], tuple(command["shape"]), command["seed"])
            worker.send(command["step"], key, array)
        elif command["op"] == "dead":
            worker.send(command["step"], key, np.zeros(0, np.float32), is_dead=True)
        print("ok", flush=True)
    worker.close()


if __name__ == "__main__":
    main()
