#!/usr/bin/python3
"""Training steps/s of the Fashion-MNIST MLP (784-256-128-10) and CNN (2 conv+pool, 2 fc) in
Loom and in PyTorch (Debian's python3-torch, CPU), same batch, same thread count, same data,
each measured in its own child process so neither library's worker threads disturb the other.
Prints a Markdown table.

    PYTHONPATH=build/python /usr/bin/python3 bench/fashion_mnist/compare.py --steps 200
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples"))
import fashion_mnist  # noqa: E402

import loom as fluid  # noqa: E402


def loom_steps_per_s(model, x, y, batch, steps):
    main, startup, _, loss, _, _ = fashion_mnist.build(model, 1e-3, 1)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    feeds = [{"image": x[i * batch:(i + 1) * batch], "label": y[i * batch:(i + 1) * batch]}
             for i in range(steps)]
    for f in feeds[:5]:
        exe.run(main, feed=f, fetch_list=[loss])
    t0 = time.perf_counter()
    for f in feeds:
        exe.run(main, feed=f, fetch_list=[loss])
    return steps / (time.perf_counter() - t0)


def torch_steps_per_s(model, x, y, batch, steps, threads):
    import torch
    import torch.nn as nn
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    if model == "mlp":
        net = nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                            nn.ReLU(), nn.Linear(128, 10))
    else:
        net = nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                            nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(),
                            nn.Linear(256, 10))
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    lossf = nn.CrossEntropyLoss()
    xs = torch.from_numpy(x.reshape(-1, 1, 28, 28))
    ys = torch.from_numpy(y.reshape(-1))
    def step(i):
        opt.zero_grad()
        loss = lossf(net(xs[i * batch:(i + 1) * batch]), ys[i * batch:(i + 1) * batch])
        loss.backward()
        opt.step()
        return loss.item()
    for i in range(5):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    return steps / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--models", default="mlp,cnn")
    ap.add_argument("--only", choices=["loom", "torch"], help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.only:
        x, y = fashion_mnist.load(fashion_mnist.DATA_DIR, "train")
        n = (args.steps + 5) * args.batch_size
        x, y = x[:n], y[:n]
        model = args.models
        threads = args.threads or os.cpu_count()
        if args.only == "loom":
            xm = x.reshape(-1, 784) if model == "mlp" else x
            print(loom_steps_per_s(model, xm, y, args.batch_size, args.steps))
        else:
            print(torch_steps_per_s(model, x, y, args.batch_size, args.steps, threads))
        return
    import subprocess

    def child(which, model, threads=0):
        out = subprocess.run([sys.executable, __file__, "--only", which, "--models", model,
                              "--steps", str(args.steps), "--batch-size", str(args.batch_size),
                              "--threads", str(threads)],
                             capture_output=True, text=True)
        if out.returncode != 0:
            raise RuntimeError(out.stderr.strip().splitlines()[-1] if out.stderr else "failed")
        return float(out.stdout.strip().splitlines()[-1])

    ncpu = os.cpu_count()
    print("| model | batch | Loom steps/s | PyTorch steps/s, 1 thread | PyTorch steps/s, %d threads "
          "| Loom / best PyTorch |" % ncpu)
    print("| --- | --- | --- | --- | --- | --- |")
    for model in args.models.split(","):
        ls = child("loom", model)
        try:
            t1, tn = child("torch", model, 1), child("torch", model, ncpu)
            print("| %s | %d | %.1f | %.1f | %.1f | %.2f |" %
                  (model, args.batch_size, ls, t1, tn, ls / max(t1, tn)))
        except RuntimeError:
            print("| %s | %d | %.1f | (python3-torch not installed) | | |" %
                  (model, args.batch_size, ls))
    print("\nLoom: OpenBLAS default threads (%d cores)." % ncpu)


if __name__ == "__main__":
    main()
