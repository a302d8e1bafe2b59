#!/usr/bin/python3
"""Trains the Fashion-MNIST MLP on several workers through a KVStore (loom.kvstore), the way an
MXNet user would: each worker computes gradients on its shard of every epoch with Loom's executor
and exchanges them (or, with --esgd-interval, its weights) through the store.

    loom launch --workers 4 --servers 2 [--clients 2] -- \\
        python3 examples/kvstore_train.py --kvstore dist_sync [--esgd-interval 16]

Modes:
  SGD (default)  every step each worker pushes its gradients and pulls the weights; the servers
                 run SGD with momentum (rescale_grad = 1 / workers): dist_sync, dist_async, and
                 with MPI clients dist_sync_mpi / dist_async_mpi (a client sums its workers'
                 gradients over MPI before its rank 0 pushes).
  ESGD           (--esgd-interval K, with MPI clients) each client trains on its own with
                 synchronous SGD inside the client (kv.client.allreduce of the gradients); every
                 K steps it pushes its weights, the servers move the centre (Elastic1) and the
                 client moves toward the pulled centre (Elastic2).
Worker 0 evaluates the test accuracy after every epoch and appends one JSON line per epoch
(mode, epoch, seconds since the start, accuracy) to --log.
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom as fluid  # noqa: E402
import loom.kvstore as kvs  # noqa: E402
from fashion_mnist import DATA_DIR, load  # noqa: E402


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        image = fluid.layers.data("image", [784])
        h = fluid.layers.fc(image, 256, act="relu")
        h = fluid.layers.fc(h, 128, act="relu")
        logits = fluid.layers.fc(h, 10)
        label = fluid.layers.data("label", [1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        acc = fluid.layers.accuracy(fluid.layers.softmax(logits), label)
        test = main.clone(for_test=True)
        params_grads = fluid.append_backward(loss)
    return main, startup, test, loss, acc, params_grads


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kvstore", default="dist_sync")
    ap.add_argument("--esgd-interval", type=int, default=0, help="0: SGD through the servers")
    ap.add_argument("--alpha", type=float, default=0.5, help="ESGD's elastic coefficient")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--batch-size", type=int, default=64, help="per worker")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--data", default=DATA_DIR)
    ap.add_argument("--log", default="", help="worker 0 appends a JSON line per epoch here")
    ap.add_argument("--mode-name", default="", help="the mode's name in the log")
    a = ap.parse_args()
    kv = kvs.create(a.kvstore)  # a server process serves here and ends
    rank, workers = kv.rank, kv.num_workers
    main_prog, startup, test, loss, acc, params_grads = build(seed=1)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.global_scope()
    exe.run(startup)
    names = [p.name for p, _ in params_grads]
    grads = [g.name for _, g in params_grads]
    weights = {n: np.array(scope.find_var(n).get_tensor()) for n in names}
    esgd = a.esgd_interval > 0
    kv.set_optimizer(kvs.optimizer.Elastic(alpha=a.alpha) if esgd else
                     kvs.optimizer.SGD(learning_rate=a.lr, momentum=0.9, rescale_grad=1.0 / workers))
    for i, n in enumerate(names):
        kv.init(i, weights[n])  # worker 0's values win
        kv.pull(i, out=weights[n])
    x, y = load(a.data, "train")
    x = x.reshape(len(x), 784)[rank::workers]
    y = y[rank::workers]
    tx, ty = load(a.data, "test")
    tx = tx.reshape(len(tx), 784)
    velocity = {n: np.zeros_like(w) for n, w in weights.items()}
    mode = a.mode_name or (a.kvstore + (" esgd/%d" % a.esgd_interval if esgd else ""))
    start, step = time.time(), 0
    steps = len(x) // a.batch_size
    for epoch in range(1, a.epochs + 1):
        for b in range(steps):
            for n, w in weights.items():
                scope.find_var(n).get_tensor().set(w, fluid.CPUPlace())
            sl = slice(b * a.batch_size, (b + 1) * a.batch_size)
            out = exe.run(main_prog, feed={"image": x[sl], "label": y[sl]},
                          fetch_list=[loss] + grads)
            step += 1
            if not esgd:  # the servers' SGD
                for i, (n, g) in enumerate(zip(names, out[1:])):
                    kv.push(i, g)
                for i, n in enumerate(names):
                    kv.pull(i, out=weights[n])
                continue
            # ESGD: synchronous SGD with momentum inside the client, the centre every K steps.
            for n, g in zip(names, out[1:]):
                g = kv.client.allreduce(g) / kv.client.size
                velocity[n] = 0.9 * velocity[n] - a.lr * g
                weights[n] += velocity[n]
            if step % a.esgd_interval == 0:
                for i, n in enumerate(names):
                    kv.push(i, weights[n] / kv.client.size)  # the client's sum is its weights
                    centre = np.empty_like(weights[n])
                    kv.pull(i, out=centre)
                    weights[n] -= a.alpha * (weights[n] - centre)
        if rank == 0:
            for n, w in weights.items():
                scope.find_var(n).get_tensor().set(w, fluid.CPUPlace())
            correct = 0.0
            for i in range(0, len(tx), 1000):
                (c,) = exe.run(test, feed={"image": tx[i:i + 1000], "label": ty[i:i + 1000]},
                               fetch_list=[acc])
                correct += float(c[0]) * len(tx[i:i + 1000])
            line = {"mode": mode, "epoch": epoch, "seconds": round(time.time() - start, 2),
                    "accuracy": round(correct / len(tx), 4)}
            print(json.dumps(line), flush=True)
            if a.log:
                with open(a.log, "a") as f:
                    f.write(json.dumps(line) + "\n")
    kv.barrier()


if __name__ == "__main__":
    main()
