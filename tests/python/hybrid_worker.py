"""One process of a hybrid job (Fluid's pserver mode whose trainers are MPI clients), started by
`loom launch --workers N --servers S --clients C -- python3 hybrid_worker.py OUT_DIR [--async]`.

Every worker trains on its rows of the same global batches (workers get unequal shares) and
writes its losses and final parameters to OUT_DIR/worker<id>.npz; servers serve and exit.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom as fluid  # noqa: E402
from pserver_util import batches, build  # noqa: E402

STEPS, ROWS = 4, 11


def shares(workers):
    """Rows of the global batch per worker: unequal (1, 2, 3, ... then the rest)."""
    sizes = [k + 1 for k in range(workers - 1)]
    return sizes + [ROWS - sum(sizes)]


def batches_of(steps, learnable):
    """The global batches every worker takes its rows of: (x, y) float64, ROWS rows each; with
    `learnable` the targets are a fixed linear map of x."""
    data = batches(steps, ROWS, "float64", seed=5)
    if learnable:
        w = np.random.RandomState(1).randn(4, 1)
        data = [(x, x @ w) for x, _ in data]
    return data


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--async", dest="sync", action="store_false")
    ap.add_argument("--opt", default="adam")
    ap.add_argument("--steps", type=int, default=STEPS)
    ap.add_argument("--learnable", action="store_true", help="targets a linear map of x")
    ap.add_argument("--lr", type=float, default=0.1, help="SGD's and Momentum's learning rate")
    a = ap.parse_args()
    workers = int(os.environ["PADDLE_TRAINERS_NUM"])
    worker = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    main_prog, startup, loss, params = build(opt=a.opt, dtype="float64", lr=a.lr)
    cfg = fluid.DistributeTranspilerConfig()
    cfg.mode = "hybrid"
    cfg.min_block_size = 4  # sliced parameters
    t = fluid.DistributeTranspiler(cfg)
    t.transpile(worker, program=main_prog, pservers=os.environ["PADDLE_PSERVER_ENDPOINTS"],
                trainers=workers, sync_mode=a.sync, startup_program=startup)
    exe = fluid.Executor(fluid.CPUPlace())
    if os.environ["PADDLE_TRAINING_ROLE"] == "PSERVER":
        prog, pstartup = t.get_pserver_programs(os.environ["PADDLE_CURRENT_ENDPOINT"])
        exe.run(pstartup)
        exe.run(prog)
        return
    exe.run(startup)
    scope = fluid.global_scope()
    init = {n: np.array(scope.find_var(n).get_tensor()) for n in params}
    prog = t.get_trainer_program()
    sizes = shares(workers)
    begin = sum(sizes[:worker])
    losses = []
    for x, y in batches_of(a.steps, a.learnable):
        rows = slice(begin, begin + sizes[worker])
        out = exe.run(prog, feed={"x": x[rows], "y": y[rows]}, fetch_list=[loss])
        losses.append(float(out[0][0]))
    final = {n: np.array(scope.find_var(n).get_tensor()) for n in params}
    np.savez(os.path.join(a.out, "worker%d.npz" % worker), losses=np.array(losses),
             **{"init/" + n: v for n, v in init.items()}, **{"final/" + n: v for n, v in final.items()})
    exe.close()


if __name__ == "__main__":
    main()
