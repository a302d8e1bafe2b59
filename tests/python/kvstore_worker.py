"""A worker (or server) of a dist_sync / dist_async KVStore job, started by `loom launch`; checks
the values it pulls against their closed forms and prints "worker R ok".

    loom launch --workers W --servers S -- python3 kvstore_worker.py dist_sync [esgd]
"""
import os
import sys

import numpy as np

import loom.kvstore as kvs

STEPS = 3
SMALL, BIG = (2, 3), (40, 5)  # BIG is sharded over the servers (LOOM_KVSTORE_BIGARRAY_BOUND=100)


def value(rank, step, shape):
    return ((rank + 1) * (step + 1) + np.arange(np.prod(shape)).reshape(shape)).astype("float32")


def esgd(kv):
    """Elastic averaging: each worker keeps its own weights; every exchange it pushes them, the
    servers move the centre (Elastic1) and the worker moves toward the pulled centre (Elastic2).
    With dist_sync both workers' pushes meet in each round: the centre follows the closed form."""
    alpha, rank, workers = 0.25, kv.rank, kv.num_workers
    kv.set_optimizer(kvs.optimizer.Elastic(alpha=alpha))
    kv.init(11, np.zeros(BIG, "float64"))
    ws = [np.full(BIG, 3.0 * (r + 1)) for r in range(workers)]  # every worker's, to check
    c = np.zeros(BIG)
    for _ in range(3):
        kv.push(11, ws[rank])
        centre = np.empty(BIG)
        kv.pull(11, out=centre)
        c = c + alpha * sum(w - c for w in ws)
        np.testing.assert_allclose(centre, c, rtol=1e-13)
        ws = [w - alpha * (w - c) for w in ws]
    print("worker %d ok" % rank, flush=True)


def main():
    kind = sys.argv[1]
    kv = kvs.create(kind)  # a server serves here and exits
    if sys.argv[2:] == ["esgd"]:
        return esgd(kv)
    rank, workers = kv.rank, kv.num_workers
    if kind.endswith("_mpi"):  # the client's workers are consecutive worker ids
        first = rank - kv.client.rank
        assert kv.client.size == int(os.environ["LOOM_CLIENT_SIZE"])
        got = kv.client.allreduce(np.full(3, rank, "int64"))
        np.testing.assert_array_equal(got, np.full(3, sum(range(first, first + kv.client.size))))
        x = np.full(2, rank, "float32")
        kv.client.broadcast(x, root=0)
        np.testing.assert_array_equal(x, np.full(2, first))
    keys, shapes = [3, 9], [SMALL, BIG]
    kv.init(keys, [np.full(s, rank + 100, "float32") for s in shapes])  # rank 0's values win
    for key, shape in zip(keys, shapes):
        out = np.empty(shape, "float32")
        kv.pull(key, out=out)
        np.testing.assert_array_equal(out, np.full(shape, 100))
    kv.barrier()  # async: nobody pushes before everyone has checked the initial values
    if os.environ.get("KV_DIE_RANK") == str(rank):  # a fault test: this worker dies here
        os.kill(os.getpid(), 9)
    for step in range(STEPS):
        for key, shape in zip(keys, shapes):
            kv.push(key, [value(rank, step, shape), value(rank, step, shape)])  # a list: summed
            out = np.empty(shape, "float32")
            kv.pull(key, out=out)
            if kind.startswith("dist_sync"):  # the merged sum of every worker's push of the step
                want = sum(2 * value(w, step, shape) for w in range(workers))
                np.testing.assert_array_equal(out, want)
    # With SGD on the servers: w -= lr * merged; plain SGD commutes, so async ends the same.
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=0.5))
    w0 = np.empty(BIG, "float32")
    kv.pull(9, out=w0)
    kv.barrier()
    for step in range(STEPS):
        kv.push(9, np.full(BIG, rank + 1, "float32"))
    kv.barrier()
    out = np.empty(BIG, "float32")
    kv.pull(9, out=out)
    want = w0 - 0.5 * STEPS * sum(w + 1 for w in range(workers))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    print("worker %d ok" % rank, flush=True)


if __name__ == "__main__":
    main()
