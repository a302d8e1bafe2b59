#!/usr/bin/python3
"""Trains a wide & deep click-through-rate model on synthetic click logs (click_logs.py) with
sparse embeddings: each step's gradient holds only the table rows its batch looked up.

One process:
    PYTHONPATH=build/python /usr/bin/python3 examples/ctr/train.py --steps 300
Data parallel over CPU places (the sparse gradients are exchanged as rows):
    PYTHONPATH=build/python /usr/bin/python3 examples/ctr/train.py --places 2
Parameter servers, 2 trainers x 2 servers (roles and endpoints from loom launch):
    build/tools/loom launch --workers 2 --servers 2 -- \\
        /usr/bin/python3 examples/ctr/train.py --steps 300
The same with the tables over the whole 10^9 id space, kept only on the servers (rows made on
first touch):
    build/tools/loom launch --workers 2 --servers 2 -- \\
        /usr/bin/python3 examples/ctr/train.py --steps 300 --distributed

The model: every impression has FIELDS ids. The wide part adds one learned weight per id; the
deep part looks up an 8-wide embedding per id, concatenates them and runs a 3-layer MLP; the
logit is their sum. Ids are hashed into --vocab rows (the table is a dense tensor of that many
rows; with --distributed the tables live on the servers, 10^9 rows by default: the ids as
they are). Training prints a progress line every --log-every steps (loss, AUC of the last steps,
samples/s) and ends with the AUC on held-out impressions.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from click_logs import FIELDS, ID_SPACE, ClickLogs, auc  # noqa: E402

import loom as fluid  # noqa: E402


def build(vocab, width, hidden, lr, optimizer, fields=FIELDS, sparse=True, distributed=False):
    """(main, startup, test program, loss, probability) of the wide & deep model."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        ids = fluid.data("ids", [None, fields], dtype="int64")
        label = fluid.data("label", [None, 1], dtype="float32")
        init = fluid.initializer.Uniform(-0.05, 0.05, seed=7)
        wide = fluid.layers.embedding(ids, [vocab, 1], is_sparse=sparse,
                                      is_distributed=distributed,
                                      param_attr=fluid.ParamAttr(name="wide", initializer=init))
        wide = fluid.layers.reduce_sum(fluid.layers.reshape(wide, [-1, fields]), dim=1,
                                       keep_dim=True)
        deep = fluid.layers.embedding(ids, [vocab, width], is_sparse=sparse,
                                      is_distributed=distributed,
                                      param_attr=fluid.ParamAttr(name="deep", initializer=init))
        h = fluid.layers.reshape(deep, [-1, fields * width])
        for i, n in enumerate(hidden):
            h = fluid.layers.fc(h, n, act="relu", param_attr=fluid.ParamAttr(
                name="fc%d_w" % i, initializer=fluid.initializer.Xavier(seed=11 + i)))
        deep_logit = fluid.layers.fc(h, 1, param_attr=fluid.ParamAttr(
            name="out_w", initializer=fluid.initializer.Xavier(seed=20)))
        logit = fluid.layers.elementwise_add(wide, deep_logit)
        prob = fluid.layers.sigmoid(logit)
        loss = fluid.layers.mean(fluid.layers.sigmoid_cross_entropy_with_logits(logit, label))
        test = main.clone(for_test=True)
        opt = {"sgd": lambda: fluid.optimizer.SGD(lr),
               "adagrad": lambda: fluid.optimizer.Adagrad(lr),
               "lazy_adam": lambda: fluid.optimizer.Adam(lr, lazy_mode=True)}[optimizer]()
        opt.minimize(loss)
    return main, startup, test, loss, prob


def hashed(ids, vocab):
    return ids % vocab


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300, help="training steps (per trainer)")
    ap.add_argument("--batch", type=int, default=256, help="impressions per step (per trainer)")
    ap.add_argument("--vocab", type=int, default=None,
                    help="rows of the embedding tables, the ids hashed into them (default "
                         "10^6; with --distributed 10^9, the whole id space)")
    ap.add_argument("--width", type=int, default=8, help="embedding width of the deep part")
    ap.add_argument("--hidden", default="64,32", help="sizes of the deep part's hidden layers")
    ap.add_argument("--optimizer", default="adagrad", choices=["sgd", "adagrad", "lazy_adam"])
    ap.add_argument("--lr", type=float, default=0.05, help="learning rate")
    ap.add_argument("--places", type=int, default=1, help="CPU places (data parallel)")
    ap.add_argument("--eval", type=int, default=20000, help="held-out impressions for the AUC")
    ap.add_argument("--log-every", type=int, default=50, help="steps between progress lines")
    ap.add_argument("--seed", type=int, default=1, help="the click-log stream")
    ap.add_argument("--warmup", type=int, default=0,
                    help="steps before the samples/s clock starts")
    ap.add_argument("--distributed", action="store_true",
                    help="the tables live on the parameter servers, rows made on first touch")
    ap.add_argument("--dense-gradients", action="store_true",
                    help="compute the tables' gradients dense (is_sparse=False), to compare")
    a = ap.parse_args()
    hidden = [int(n) for n in a.hidden.split(",") if n]
    role = os.environ.get("PADDLE_TRAINING_ROLE", "")
    if a.distributed and not role:
        ap.error("--distributed keeps the tables on parameter servers: run it under "
                 "loom launch --workers N --servers S")
    if a.vocab is None:
        a.vocab = ID_SPACE if a.distributed else 1000000
    trainer_id = int(os.environ.get("PADDLE_TRAINER_ID", "0"))
    trainers = int(os.environ.get("PADDLE_TRAINERS_NUM", "1"))

    main_prog, startup, test, loss, prob = build(a.vocab, a.width, hidden, a.lr, a.optimizer,
                                                 sparse=not a.dense_gradients,
                                                 distributed=a.distributed)
    exe = fluid.Executor(fluid.CPUPlace())
    prog = main_prog
    if role:  # a parameter-server job started by loom launch
        t = fluid.DistributeTranspiler()
        t.transpile(trainer_id, program=main_prog, startup_program=startup,
                    pservers=os.environ["PADDLE_PSERVER_ENDPOINTS"], trainers=trainers)
        if role == "PSERVER":
            pserver, pstartup = t.get_pserver_programs(os.environ["PADDLE_CURRENT_ENDPOINT"])
            exe.run(pstartup)
            exe.run(pserver)
            return
        prog = t.get_trainer_program()
        # The test program of a trainer: its forward pass, with the parameters of its last step
        # (a distributed table's rows are prefetched from the servers).
        test = prog.clone(for_test=True)
    exe.run(startup)
    if a.places > 1:
        prog = fluid.CompiledProgram(main_prog).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(a.places))

    logs = ClickLogs(seed=a.seed * 1000 + trainer_id)
    who = "trainer %d: " % trainer_id if role else ""
    t0, seen, window = time.time(), 0, ([], [])
    for step in range(1, a.steps + 1):
        if step == a.warmup + 1:
            t0, seen = time.time(), 0
        ids, label = logs.batch(a.batch)
        lv, pv = exe.run(prog, feed={"ids": hashed(ids, a.vocab), "label": label},
                         fetch_list=[loss, prob])
        seen += a.batch
        window[0].append(label)
        window[1].append(np.asarray(pv).reshape(-1, 1)[:len(label)])
        if step % a.log_every == 0 or step == a.steps:
            rate = seen / max(time.time() - t0, 1e-9)
            print("%sstep %d/%d  loss %.4f  auc %.4f  %.0f samples/s" % (
                who, step, a.steps, float(np.mean(lv)), auc(np.concatenate(window[0]),
                                                            np.concatenate(window[1])), rate),
                  flush=True)
            window = ([], [])
    held_out = ClickLogs(seed=a.seed * 1000 + 999)
    ids, label = held_out.batch(a.eval)
    pv, = exe.run(test, feed={"ids": hashed(ids, a.vocab), "label": label}, fetch_list=[prob])
    print("%sheld-out auc %.4f over %d impressions (the hidden model's own: %.4f)" % (
        who, auc(label, pv), a.eval, auc(label, held_out.click_probability(ids))), flush=True)
    if role:
        exe.close()


if __name__ == "__main__":
    main()
