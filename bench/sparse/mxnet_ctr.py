"""The CTR example's wide & deep model (examples/ctr/train.py) in MXNet 1.9.1, trained with
row_sparse embeddings through MXNet's parameter servers (`dist_sync` KVStore, ps-lite), as the
peer of Loom's job in bench/sparse/ctr_vs_mxnet.sh.

    /opt/venvs/mxnet/bin/python bench/sparse/mxnet_ctr.py --workers 2 --servers 2 \\
        --steps 200 --vocab 1000000 --batch 256

Starts a scheduler, the servers and the workers on loopback (each its own DMLC_* environment).
Each worker reads its own click-log stream (examples/ctr/click_logs.py, the same seeds as
train.py), hashes the ids into --vocab rows, pulls the rows its batch needs
(Module.prepare with sparse_row_id_fn: row_sparse_pull), pushes row_sparse gradients and lets
the servers run Adagrad. Prints, per worker, samples/s over the steps after the first 10 and
the held-out AUC. The same model: a 1-wide and an 8-wide embedding per field, a 64-32 MLP, the
logit their sum, a logistic loss averaged over the batch.
"""
import argparse
import json
import os
import socket
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "ctr"))
from click_logs import FIELDS, ClickLogs, auc  # noqa: E402

DEADLINE_S = 900
WARMUP = 10


def model(mx, vocab, width):
    ids = mx.sym.Variable("ids")
    label = mx.sym.Variable("label")
    init = mx.init.Uniform(0.05)
    wide_w = mx.sym.Variable("wide_w", shape=(vocab, 1), stype="row_sparse", init=init)
    deep_w = mx.sym.Variable("deep_w", shape=(vocab, width), stype="row_sparse", init=init)
    wide = mx.sym.Embedding(data=ids, weight=wide_w, input_dim=vocab, output_dim=1,
                            sparse_grad=True)
    wide = mx.sym.sum(mx.sym.reshape(wide, shape=(-1, FIELDS)), axis=1, keepdims=True)
    deep = mx.sym.Embedding(data=ids, weight=deep_w, input_dim=vocab, output_dim=width,
                            sparse_grad=True)
    h = mx.sym.reshape(deep, shape=(-1, FIELDS * width))
    for n in (64, 32):
        h = mx.sym.Activation(mx.sym.FullyConnected(h, num_hidden=n), act_type="relu")
    logit = wide + mx.sym.FullyConnected(h, num_hidden=1)
    return mx.sym.LogisticRegressionOutput(logit, label), logit


def worker(a):
    import mxnet as mx
    import numpy as np
    kv = mx.kv.create("dist_sync")
    out, logit = model(mx, a.vocab, a.width)
    mod = mx.mod.Module(out, data_names=["ids"], label_names=["label"])
    mod.bind(data_shapes=[("ids", (a.batch, FIELDS))], label_shapes=[("label", (a.batch, 1))])
    mod.init_params()
    # The loss is averaged over the global batch, as Loom's mean loss is over each trainer's.
    mod.init_optimizer(kvstore=kv, optimizer="adagrad",
                       optimizer_params={"learning_rate": a.lr, "rescale_grad": 1.0 / a.batch})
    logs = ClickLogs(seed=a.seed * 1000 + kv.rank)
    t0 = None
    for step in range(a.steps):
        if step == WARMUP:
            mx.nd.waitall()
            t0 = time.perf_counter()
        ids, label = logs.batch(a.batch)
        ids = (ids % a.vocab).astype("float32")
        batch = mx.io.DataBatch([mx.nd.array(ids)], [mx.nd.array(label)])
        rows = mx.nd.array(np.unique(ids), dtype="int64")
        mod.prepare(batch, sparse_row_id_fn=lambda b: {"wide_w": rows, "deep_w": rows})
        mod.forward_backward(batch)
        mod.update()
    mx.nd.waitall()
    rate = (a.steps - WARMUP) * a.batch / (time.perf_counter() - t0)
    held = ClickLogs(seed=a.seed * 1000 + 999)
    ids, label = held.batch(a.eval)
    ids = (ids % a.vocab).astype("float32")
    probs = []
    for i in range(0, a.eval - a.batch + 1, a.batch):
        batch = mx.io.DataBatch([mx.nd.array(ids[i:i + a.batch])],
                                [mx.nd.array(label[i:i + a.batch])])
        rows = mx.nd.array(np.unique(ids[i:i + a.batch]), dtype="int64")
        mod.prepare(batch, sparse_row_id_fn=lambda b: {"wide_w": rows, "deep_w": rows})
        mod.forward(batch, is_train=False)
        probs.append(mod.get_outputs()[0].asnumpy())
    n = len(probs) * a.batch
    print("RESULT " + json.dumps({"rank": kv.rank, "samples_per_s": rate,
                                  "auc": auc(label[:n], np.concatenate(probs))}), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--servers", type=int, default=2)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=256, help="impressions per step per worker")
    ap.add_argument("--vocab", type=int, default=1000000)
    ap.add_argument("--width", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--eval", type=int, default=20000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.steps <= WARMUP:
        sys.exit("mxnet_ctr: --steps must exceed %d (the warm-up steps)" % WARMUP)
    if a.worker:
        return worker(a)
    end = time.monotonic() + DEADLINE_S
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
                DMLC_NUM_SERVER=str(a.servers), DMLC_NUM_WORKER=str(a.workers),
                DMLC_NODE_HOST="127.0.0.1", PS_VERBOSE="0")
    procs = [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(base, DMLC_ROLE=r))
             for r in ["scheduler"] + ["server"] * a.servers]
    workers = [subprocess.Popen([sys.executable, __file__, "--worker"] + sys.argv[1:],
                                env=dict(base, DMLC_ROLE="worker"), stdout=subprocess.PIPE,
                                text=True) for _ in range(a.workers)]
    procs += workers
    try:
        results = []
        for w in workers:
            out, _ = w.communicate(timeout=max(1, end - time.monotonic()))
            if w.returncode != 0:
                sys.exit("mxnet_ctr: worker pid %d exited %d" % (w.pid, w.returncode))
            results.append(json.loads(next(l for l in out.splitlines()
                                           if l.startswith("RESULT "))[7:]))
        for p in procs[:1 + a.servers]:
            p.wait(timeout=max(1, min(10, end - time.monotonic())))
    finally:
        for p in procs:  # on any failure or timeout: kill what is still running, by pid
            if p.poll() is None:
                p.kill()
                p.wait()
    for r in sorted(results, key=lambda r: r["rank"]):
        print("worker %d: %.0f samples/s  held-out auc %.4f" % (r["rank"], r["samples_per_s"],
                                                              r["auc"]))


if __name__ == "__main__":
    main()
