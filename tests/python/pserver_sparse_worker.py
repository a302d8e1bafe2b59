"""One process of a parameter-server job with a distributed lookup table of 10^9 rows
(fluid.embedding(size=[10**9, 8], is_sparse=True, is_distributed=True)), as a Fluid script is
written: the role and endpoints from Paddle's environment. Prints the process's peak resident
memory (VmHWM) and, for trainers, each step's loss. Started by test_pserver_sparse.py:

    loom launch --workers 2 --servers 2 -- python3 pserver_sparse_worker.py [--steps N] [--async]
        [--rows R] [--first-step K] [--checkpoint DIR] [--resume DIR]

--checkpoint: trainer 0 saves the job (fluid.io.save_persistables) after its steps; --resume:
servers load it (fluid.io.load_persistables) before serving, and trainers skip the first K
batches. --table sparse|dense makes the table an ordinary sliced one (is_sparse True or False)
instead of a distributed one. --report-bytes: trainers print, per step, the bytes their
clients sent and received (core.rpc_traffic()) and the batch's unique ids. --export DIR:
trainer 0 saves the inference model (DIR/model, save_inference_model) after its steps, then
runs the probe ids of DIR/probe.npy through the trainer's test program, against the live
servers, into DIR/online.npy.
"""
import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom as fluid  # noqa: E402

ROWS, WIDTH = 10**9, 8
PREDICTION = []  # the name of the model's output, set by build


def peak_rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return -1


def build(rows=ROWS, table="distributed", opt="sgd"):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        ids = fluid.data(name="ids", shape=[None, 1], dtype="int64")
        y = fluid.data(name="y", shape=[None, 1], dtype="float32")
        emb = fluid.embedding(input=ids, size=[rows, WIDTH], is_sparse=table != "dense",
                              is_distributed=table == "distributed")
        p = fluid.layers.fc(fluid.layers.reshape(emb, [-1, WIDTH]), size=1)
        PREDICTION[:] = [p.name]
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        {"sgd": lambda: fluid.optimizer.SGD(0.1),
         "adagrad": lambda: fluid.optimizer.Adagrad(0.1),
         "adam": lambda: fluid.optimizer.Adam(0.05, lazy_mode=True)}[opt]().minimize(loss)
    return main, startup, loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--async", dest="sync", action="store_false")
    ap.add_argument("--rows", type=int, default=ROWS)
    ap.add_argument("--first-step", type=int, default=0)
    ap.add_argument("--checkpoint", default="")
    ap.add_argument("--resume", default="")
    ap.add_argument("--table", default="distributed", choices=["distributed", "sparse", "dense"])
    ap.add_argument("--report-bytes", action="store_true")
    ap.add_argument("--export", default="")
    ap.add_argument("--opt", default="sgd", choices=["sgd", "adagrad", "adam"])
    a = ap.parse_args()
    role = os.environ["PADDLE_TRAINING_ROLE"]
    eps = os.environ["PADDLE_PSERVER_ENDPOINTS"]
    trainers = int(os.environ["PADDLE_TRAINERS_NUM"])
    trainer_id = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    main_prog, startup, loss = build(a.rows, a.table, a.opt)
    t = fluid.DistributeTranspiler()
    t.transpile(trainer_id, program=main_prog, pservers=eps, trainers=trainers,
                sync_mode=a.sync, startup_program=startup)
    exe = fluid.Executor(fluid.CPUPlace())
    if role == "PSERVER":
        prog, pstartup = t.get_pserver_programs(os.environ["PADDLE_CURRENT_ENDPOINT"])
        exe.run(pstartup)
        if a.resume:
            fluid.io.load_persistables(exe, a.resume, prog)
        exe.run(prog)
        print("server peak_rss_kib %d" % peak_rss_kib(), flush=True)
        return
    exe.run(startup)
    prog = t.get_trainer_program()
    rng = np.random.RandomState(100 + trainer_id)
    for step in range(a.first_step + a.steps):
        ids = rng.randint(0, a.rows, size=(a.batch, 1)).astype(np.int64)
        y = rng.randn(a.batch, 1).astype(np.float32)
        if step < a.first_step:
            continue
        fluid.core.reset_rpc_traffic()
        out = exe.run(prog, feed={"ids": ids, "y": y}, fetch_list=[loss])
        print("step %d loss %.9g" % (step, float(out[0][0])), flush=True)
        if a.report_bytes:
            t = fluid.core.rpc_traffic()
            print("step %d bytes_sent %d bytes_received %d unique %d" % (
                step, t["bytes_sent"], t["bytes_received"], len(np.unique(ids))), flush=True)
    if a.export and trainer_id == 0:
        pred = prog.global_block().var(PREDICTION[0])
        fluid.io.save_inference_model(os.path.join(a.export, "model"), ["ids"], [pred], exe,
                                      main_program=prog)
        probe = np.load(os.path.join(a.export, "probe.npy"))
        test = prog.clone(for_test=True)
        online = exe.run(test, feed={"ids": probe, "y": np.zeros((len(probe), 1), "float32")},
                         fetch_list=[pred])[0]
        np.save(os.path.join(a.export, "online.npy"), online)
    if a.checkpoint and trainer_id == 0:
        fluid.io.save_persistables(exe, a.checkpoint, prog)
    exe.close()
    print("trainer peak_rss_kib %d" % peak_rss_kib(), flush=True)


if __name__ == "__main__":
    main()
