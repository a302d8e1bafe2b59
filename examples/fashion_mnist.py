#!/usr/bin/python3
"""Trains an MLP or a CNN on Fashion-MNIST with Loom's Fluid-compatible API.

Reads the dataset Debian's `dataset-fashion-mnist` package installs under
/usr/share/datasets/fashion-mnist/ (or --data DIR), shows a progress bar with loss and
samples/s, evaluates test accuracy after every epoch, and can save the trained program as a
bundle for `loom run` (--save-bundle DIR) and a loss curve (--plot FILE.png).

    PYTHONPATH=build/python /usr/bin/python3 examples/fashion_mnist.py --model mlp --epochs 10
"""
import argparse
import gzip
import os
import sys
import time

import numpy as np

import loom as fluid

DATA_DIR = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """Images as float32 [N, 1, 28, 28] scaled to [0, 1], or labels as int64 [N, 1]."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[0:4], "big")
    n = int.from_bytes(data[4:8], "big")
    if magic == 2051:
        rows, cols = int.from_bytes(data[8:12], "big"), int.from_bytes(data[12:16], "big")
        x = np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, rows, cols)
        return x.astype("float32") / 255.0
    if magic == 2049:
        return np.frombuffer(data, np.uint8, offset=8).astype("int64").reshape(n, 1)
    raise ValueError("%s: not an IDX image or label file (magic %d)" % (path, magic))


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    def find(kind):
        for name in ("%s-%s-idx%d-ubyte.gz", "%s-%s-idx%d-ubyte"):
            p = os.path.join(data_dir, name % (prefix, kind, 3 if kind == "images" else 1))
            if os.path.exists(p):
                return p
        raise FileNotFoundError("Fashion-MNIST %s %s not found in %s (install Debian's "
                                "dataset-fashion-mnist or pass --data DIR)" % (split, kind, data_dir))
    return read_idx(find("images")), read_idx(find("labels"))


def build(model, lr, seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        if model == "mlp":
            image = fluid.layers.data("image", [784])
            h = fluid.layers.fc(image, 256, act="relu")
            h = fluid.layers.fc(h, 128, act="relu")
        else:
            image = fluid.layers.data("image", [1, 28, 28])
            h = fluid.layers.conv2d(image, 32, 5, padding=2, act="relu")
            h = fluid.layers.pool2d(h, 2, "max", 2)
            h = fluid.layers.conv2d(h, 64, 5, padding=2, act="relu")
            h = fluid.layers.pool2d(h, 2, "max", 2)
            h = fluid.layers.fc(h, 256, act="relu")
        logits = fluid.layers.fc(h, 10)
        label = fluid.layers.data("label", [1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, label))
        acc = fluid.layers.accuracy(fluid.layers.softmax(logits), label)
        test = main.clone(for_test=True)
        opt = fluid.optimizer.Adam(lr)
        opt.minimize(loss)
    return main, startup, test, loss, acc, opt


def evaluate(exe, test, acc, x, y, batch):
    correct = 0
    for i in range(0, len(x), batch):
        (a,) = exe.run(test, feed={"image": x[i:i + batch], "label": y[i:i + batch]},
                       fetch_list=[acc])
        correct += float(a[0]) * len(x[i:i + batch])
    return correct / len(x)


def progress(epoch, step, steps, loss, rate):
    width = 30
    done = int(width * step / steps)
    sys.stdout.write("\repoch %d [%s%s] %d/%d  loss %.4f  %.0f samples/s" %
                     (epoch, "=" * done, "." * (width - done), step, steps, loss, rate))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--lr-decay", type=float, default=0.8,
                    help="multiply the learning rate by this after every epoch")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data", default=DATA_DIR, help="directory with the IDX files")
    ap.add_argument("--limit", type=int, default=0, help="use only the first N training images")
    ap.add_argument("--plot", help="write the loss curve to this PNG")
    ap.add_argument("--save-bundle", help="save main/startup programs and data for `loom run`")
    ap.add_argument("--places", type=int, default=1,
                    help="train data-parallel on this many CPU places (CompiledProgram); the "
                         "batch size is the global batch")
    ap.add_argument("--mpi", action="store_true",
                    help="one data-parallel rank per process: start with `mpirun -np N python3 "
                         "examples/fashion_mnist.py --mpi`; every rank takes its share of each "
                         "global batch, rank 0 prints")
    ap.add_argument("--eval-params", metavar="DIR",
                    help="only evaluate: load parameters saved in DIR (e.g. by `loom run "
                         "--save-params`) and print the test accuracy")
    args = ap.parse_args()

    x_train, y_train = load(args.data, "train")
    x_test, y_test = load(args.data, "test")
    if args.limit:
        x_train, y_train = x_train[:args.limit], y_train[:args.limit]
    if args.model == "mlp":
        x_train, x_test = x_train.reshape(-1, 784), x_test.reshape(-1, 784)

    main_prog, startup, test, loss, acc, opt = build(args.model, args.lr, args.seed)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    if args.eval_params:
        fluid.io.load_params(exe, args.eval_params, main_program=test)
        print("test accuracy %.4f (parameters from %s)" %
              (evaluate(exe, test, acc, x_test, y_test, 1000), args.eval_params))
        return 0
    program = main_prog
    rank, nranks = 0, 1
    if args.mpi:
        rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", os.environ.get("PMI_RANK", "0")))
        nranks = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("PMI_SIZE", "1")))
        bs = fluid.BuildStrategy()
        bs.transport = "mpi"
        program = fluid.CompiledProgram(main_prog).with_data_parallel(loss_name=loss.name,
                                                                      build_strategy=bs)
    elif args.places > 1:
        program = fluid.CompiledProgram(main_prog).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(args.places))
    if rank != 0:  # only rank 0 reports
        sys.stdout = open(os.devnull, "w")
    rng = np.random.RandomState(args.seed)
    steps = len(x_train) // args.batch_size
    curve, accs = [], []
    start = time.time()
    for epoch in range(1, args.epochs + 1):
        order = rng.permutation(len(x_train))
        t0 = time.time()
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            if args.mpi:  # this rank's share of the global batch
                idx = np.array_split(idx, nranks)[rank]
            (l,) = exe.run(program, feed={"image": x_train[idx], "label": y_train[idx]},
                           fetch_list=[loss])
            curve.append(float(np.mean(l)))
            if s % 20 == 0 or s == steps - 1:
                progress(epoch, s + 1, steps, np.mean(curve[-20:]),
                         (s + 1) * args.batch_size / max(time.time() - t0, 1e-9))
        scopes = (program.local_scopes() if args.places > 1 or args.mpi
                  else [fluid.global_scope()])
        for scope in scopes:  # every place keeps its own copy of the learning rate
            lr_var = scope.find_var(opt._lr_var.name).get_tensor()
            lr_var.set(np.array(lr_var) * args.lr_decay, fluid.CPUPlace())
        accuracy = evaluate(exe, test, acc, x_test, y_test, 1000)
        accs.append(accuracy)
        print("\nepoch %d: test accuracy %.4f  (%.1f s, %.1f steps/s)" %
              (epoch, accuracy, time.time() - t0, steps / (time.time() - t0)))
    if accs:
        print("final test accuracy %.4f after %d epochs in %.1f s" %
              (accs[-1], args.epochs, time.time() - start))
    if args.plot:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        plt.figure(figsize=(7, 4))
        plt.plot(np.convolve(curve, np.ones(50) / 50, mode="valid"))
        plt.xlabel("step")
        plt.ylabel("training loss (moving average of 50)")
        plt.title("Fashion-MNIST %s, test accuracy %.3f" % (args.model, accs[-1] if accs else 0))
        plt.tight_layout()
        plt.savefig(args.plot)
        print("wrote", args.plot)
    if args.save_bundle:
        fluid.io.save_program_bundle(args.save_bundle, main_prog, startup, ["image", "label"],
                                     [loss], data={"image": x_train, "label": y_train},
                                     batch_size=args.batch_size,
                                     description="Fashion-MNIST %s" % args.model)
        print("wrote bundle", args.save_bundle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
