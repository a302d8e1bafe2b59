"""Row-sparse push + pull of ROWS random rows of a HEIGHT x WIDTH float32 key against the dense
push + pull of the whole key, through a dist_sync store (1 worker, 2 servers on this machine):
wall time per round (median of ITERS after WARMUP) and payload bytes on the wire per round
(ids + rows frames for the sparse key; the whole array both ways for the dense one; the protobuf
headers, tens of bytes per message, are left out).

    build/tools/loom launch --workers 1 --servers 2 -- \\
        /usr/bin/python3 bench/kvstore/row_sparse.py          # PYTHONPATH=build/python
Prints one JSON line per key kind.
"""
import json
import statistics
import time

import numpy as np

import loom.kvstore as kvs

HEIGHT, WIDTH, ROWS, WARMUP, ITERS = 10**6, 64, 1000, 2, 10


def timed(fn):
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(ITERS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main():
    kv = kvs.create("dist_sync")  # a server serves here and exits
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=0.1))
    rng = np.random.default_rng(0)
    kv.init_sparse_table("sparse", (HEIGHT, WIDTH), initializer=kvs.initializer.Uniform(-1, 1))
    ids = np.sort(rng.choice(HEIGHT, ROWS, replace=False))
    grad = kvs.row_sparse_array((rng.standard_normal((ROWS, WIDTH)).astype("float32"), ids),
                                shape=(HEIGHT, WIDTH))
    out = kvs.row_sparse_array((np.zeros((0, WIDTH), "float32"), []), shape=(HEIGHT, WIDTH))

    def sparse_round():
        kv.push("sparse", grad)
        kv.row_sparse_pull("sparse", out=out, row_ids=ids)

    ms = timed(sparse_round)
    wire = (8 + 4 * WIDTH) * ROWS + 8 * ROWS + (8 + 4 * WIDTH) * ROWS  # push, get ids, reply
    print(json.dumps({"key": "row_sparse", "rows": ROWS, "shape": [HEIGHT, WIDTH],
                      "ms_per_round": round(ms, 2), "wire_bytes_per_round": wire}), flush=True)

    kv.init("dense", np.zeros((HEIGHT, WIDTH), "float32"))
    g = grad.asnumpy()
    o = np.empty((HEIGHT, WIDTH), "float32")

    def dense_round():
        kv.push("dense", g)
        kv.pull("dense", out=o)

    ms = timed(dense_round)
    print(json.dumps({"key": "dense", "rows": HEIGHT, "shape": [HEIGHT, WIDTH],
                      "ms_per_round": round(ms, 2),
                      "wire_bytes_per_round": 2 * HEIGHT * WIDTH * 4}), flush=True)


if __name__ == "__main__":
    main()
