"""A worker (or server) of a distributed KVStore job with row-sparse keys, started by `loom
launch`; checks what it pulls against a local store replaying every worker's pushes and prints
"worker R ok".

    loom launch --workers W --servers S [--clients C] -- python3 kvstore_row_sparse_worker.py KIND
"""
import sys

import numpy as np

import loom.kvstore as kvs

STEPS, HEIGHT, WIDTH = 3, 40, 3


def grad(rank, step):
    """Worker rank's gradient at step: row 0 (every worker's) and three rows of its own,
    integer-valued so that every sum is exact whatever its order."""
    ids = sorted({0} | {(rank * 7 + step * 3 + j) % HEIGHT for j in range(3)})
    data = ((rank + 1) * (step + 1) + np.arange(len(ids) * WIDTH)).reshape(-1, WIDTH)
    return kvs.row_sparse_array((data.astype("float64"), ids), shape=(HEIGHT, WIDTH))


def main():
    kind = sys.argv[1]
    kv = kvs.create(kind)  # a server serves here and exits
    rank, workers = kv.rank, kv.num_workers
    sync = kind.startswith("dist_sync")
    opt = kvs.optimizer.SGD(learning_rate=0.5, momentum=0.5 if sync else 0.0)
    kv.set_optimizer(opt)
    ref = kvs.create("local")  # every worker's pushes, replayed in one process
    ref.set_optimizer(opt)
    w0 = np.arange(HEIGHT * WIDTH, dtype="float64").reshape(HEIGHT, WIDTH) / 4
    # Rank 0's value wins: the others pass another one.
    kv.init(1, kvs.row_sparse_array(w0 if rank == 0 else w0 + 1))
    ref.init(1, kvs.row_sparse_array(w0))
    got = kv.row_sparse_pull(1, row_ids=np.array([39, 0, 0, 5]))
    np.testing.assert_array_equal(got.indices, [0, 5, 39])
    np.testing.assert_array_equal(got.data, w0[[0, 5, 39]])
    kv.barrier()  # async: nobody pushes before everyone has checked the initial value
    for step in range(STEPS):
        kv.push(1, grad(rank, step))
        ref.push(1, [grad(r, step) for r in range(workers)])
        if sync:  # a pull after a push sees the merge of every worker's push
            ids = np.arange(HEIGHT)
            np.testing.assert_allclose(kv.row_sparse_pull(1, row_ids=ids).data,
                                       ref.row_sparse_pull(1, row_ids=ids).data, rtol=1e-12)
    kv.barrier()
    outs = [kvs.row_sparse_array((np.zeros((0, WIDTH)), []), shape=(HEIGHT, WIDTH))
            for _ in range(2)]
    ids = [np.arange(HEIGHT)[::-1], np.array([0, 3, 3])]
    kv.row_sparse_pull(1, out=outs, row_ids=ids)
    want = ref.row_sparse_pull(1, row_ids=np.arange(HEIGHT)).asnumpy()
    np.testing.assert_allclose(outs[0].asnumpy(), want, rtol=1e-12)
    np.testing.assert_array_equal(outs[1].indices, [0, 3])
    np.testing.assert_allclose(outs[1].data, want[[0, 3]], rtol=1e-12)
    touched = sorted({int(i) for r in range(workers) for s in range(STEPS)
                      for i in grad(r, s).indices})
    untouched = np.setdiff1d(np.arange(HEIGHT), touched)
    np.testing.assert_array_equal(outs[0].asnumpy()[untouched], w0[untouched])

    # A table far larger than memory, rows from (seed, id) only: the same rows as a local table
    # whatever the number of servers holding them.
    init = kvs.initializer.Uniform(-1, 1, seed=3)
    kv.init_sparse_table(2, (2**62, 4), initializer=init)
    local = kvs.create("local")
    local.init_sparse_table(2, (2**62, 4), initializer=init)
    ids = np.array([2**61 + rank, 5, 123456789], "int64")
    np.testing.assert_array_equal(kv.row_sparse_pull(2, row_ids=ids).data,
                                  local.row_sparse_pull(2, row_ids=ids).data)

    # Clear errors naming the key.
    kv.init(3, np.zeros(4))
    for bad, match in [(lambda: kv.push(3, grad(rank, 0)), "key 3.*dense"),
                       (lambda: kv.push(1, np.zeros((HEIGHT, WIDTH))), "key 1.*row_sparse"),
                       (lambda: kv.row_sparse_pull(1, row_ids=[HEIGHT]), "key 1.*outside")]:
        try:
            bad()
        except ValueError as e:
            assert __import__("re").search(match, str(e)), str(e)
        else:
            raise AssertionError("no error for " + match)
    kv.barrier()
    print("worker %d ok" % rank, flush=True)


if __name__ == "__main__":
    main()
