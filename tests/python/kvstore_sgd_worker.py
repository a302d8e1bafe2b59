"""A worker of a KVStore SGD job (dist_sync, or with MPI clients dist_sync_mpi, with or without
servers): a float64 MLP, each worker's rows of every global batch, gradients pushed and weights
pulled every step, the servers (or, without servers, every rank) running SGD with
rescale_grad = 1 / workers. Writes its final weights to OUT/worker<rank>.npz.

    loom launch --workers W --servers S [--clients C] -- python3 kvstore_sgd_worker.py KIND OUT
"""
import os
import sys

import numpy as np

import loom as fluid
import loom.kvstore as kvs

STEPS, ROWS, LR = 4, 3, 0.2


def build():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="float64")
        h = fluid.layers.fc(x, 5, act="tanh")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        params_grads = fluid.append_backward(loss)
    return main, startup, loss, params_grads


def batches(workers):
    rng = np.random.RandomState(0)
    return [(rng.randn(ROWS * workers, 4), rng.randn(ROWS * workers, 1)) for _ in range(STEPS)]


def single_process(workers):
    """The parameters of one process running plain SGD on the union of `workers` workers'
    batches, by name: what every worker must end with."""
    main_prog, startup, _, params_grads = build()
    with fluid.scope_guard(fluid.Scope()):
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.global_scope()
        exe.run(startup)
        names, grads = [p.name for p, _ in params_grads], [g.name for _, g in params_grads]
        for x, y in batches(workers):
            out = exe.run(main_prog, feed={"x": x, "y": y}, fetch_list=grads)
            for n, g in zip(names, out):
                t = scope.find_var(n).get_tensor()
                t.set(np.array(t) - LR * g, fluid.CPUPlace())
        return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


def main():
    kind, out_dir = sys.argv[1], sys.argv[2]
    kv = kvs.create(kind)
    rank, workers = kv.rank, kv.num_workers
    main_prog, startup, loss, params_grads = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.global_scope()
    exe.run(startup)
    names, grads = [p.name for p, _ in params_grads], [g.name for _, g in params_grads]
    kv.set_optimizer(kvs.optimizer.SGD(learning_rate=LR, rescale_grad=1.0 / workers))
    w = {}
    for i, n in enumerate(names):
        w[n] = np.array(scope.find_var(n).get_tensor())
        kv.init(i, w[n])
        kv.pull(i, out=w[n])
    for x, y in batches(workers):
        for n in names:
            scope.find_var(n).get_tensor().set(w[n], fluid.CPUPlace())
        rows = slice(rank * ROWS, (rank + 1) * ROWS)
        out = exe.run(main_prog, feed={"x": x[rows], "y": y[rows]}, fetch_list=grads)
        for i, g in enumerate(out):
            kv.push(i, g)
        for i, n in enumerate(names):
            kv.pull(i, out=w[n])
    np.savez(os.path.join(out_dir, "worker%d.npz" % rank), **w)


if __name__ == "__main__":
    main()
