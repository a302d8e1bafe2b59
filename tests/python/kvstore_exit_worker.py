"""A worker of a KVStore job that checks its own results and ends as scripts do: the store and
its client held by module globals to the end, then sys.exit(0) (or an uncaught error on one
worker with `fail`). Started by test_kvstore.py under `loom launch --clients`.

    loom launch --workers 4 --servers 2 --clients 2 -- python3 kvstore_exit_worker.py TYPE [fail]
"""
import os
import sys

import numpy as np

from loom import kvstore as kvs

kind = sys.argv[1]
kv = kvs.create(kind)
client = kv.client  # held to the end, as a script's globals are
rank = int(os.environ["PADDLE_TRAINER_ID"])
kv.init(3, np.zeros(8))
kv.push(3, np.full(8, float(rank + 1)))
kv.barrier()
out = np.empty(8)
kv.pull(3, out=out)
if kind.startswith("dist_sync"):
    workers = int(os.environ["PADDLE_TRAINERS_NUM"])
    assert np.allclose(out, sum(range(1, workers + 1))), out
total = client.allreduce(np.ones(2))
assert np.allclose(total, client.size), total
if sys.argv[2:] == ["fail"] and rank == 1:
    raise RuntimeError("worker 1 found its data unreadable")
print("worker %d checked" % rank, flush=True)
sys.exit(0)
