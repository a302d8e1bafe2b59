"""The rows of bench/ops/ops_bench.cc in PyTorch (CPU, eager), timed the same way: forward is one
call of the op on tensors made beforehand; backward is torch.autograd.grad of the op's output
with a ones seed, over a graph recorded once (retain_graph), so only the grad kernels run.
Prints one JSON object: {"<row>/fwd": microseconds, ...}, each the median of --repetitions
timed batches.

With --device cuda the tensors live on the GPU and every timed call ends with
torch.cuda.synchronize(), as ops_bench --place=cuda:0 drains its stream after every run.

Usage: /usr/bin/python3 bench/ops/torch_ops.py [--threads 2] [--repetitions 5] [--min-time 0.2]
                                              [--device cpu|cuda]
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def mm_row(m, k, n):
    x = torch.rand(m, k) * 2 - 1
    y = torch.rand(k, n) * 2 - 1
    x.requires_grad_(True)
    y.requires_grad_(True)
    return (lambda: torch.mm(x, y)), [x, y]


def conv_row(c_in, c_out, hw):
    x = torch.rand(64, c_in, hw, hw) * 2 - 1
    w = (torch.rand(c_out, c_in, 5, 5) * 2 - 1) * 0.1
    w.requires_grad_(True)
    inputs = [w]
    if c_in != 1:  # the first layer's input is data: no gradient, as in ops_bench.cc
        x.requires_grad_(True)
        inputs = [x, w]
    return (lambda: F.conv2d(x, w, padding=2)), inputs


def swce_row():
    logits = (torch.rand(512, 1000) * 6 - 3).requires_grad_(True)
    label = torch.randint(0, 1000, (512,))
    return (lambda: F.cross_entropy(logits, label, reduction="none")), [logits]


def batch_norm_row():
    x = (torch.rand(64, 32, 28, 28) * 2 - 1).requires_grad_(True)
    scale = (torch.rand(32) + 0.5).requires_grad_(True)
    bias = (torch.rand(32) * 2 - 1).requires_grad_(True)
    mean = torch.rand(32) * 2 - 1
    var = torch.rand(32) + 0.5
    return (lambda: F.batch_norm(x, mean, var, scale, bias, training=True, momentum=0.1,
                                 eps=1e-5)), [x, scale, bias]


def adam_step():
    n = 1 << 20
    p = torch.nn.Parameter(torch.rand(n) * 2 - 1)
    p.grad = torch.rand(n) * 2 - 1
    opt = torch.optim.Adam([p], lr=1e-6)
    opt.step()  # creates the moment buffers outside the timed loop
    return opt.step


def time_fn(fn, repetitions, min_time):
    fn()
    iters = 1
    while True:  # grow the batch until one batch lasts min_time, as Google Benchmark does
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        dt = time.perf_counter() - t0
        if dt >= min_time or iters >= 1 << 20:
            break
        iters = max(iters * 2, int(iters * min_time / max(dt, 1e-9) * 1.2))
    samples = []
    for _ in range(repetitions):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        samples.append((time.perf_counter() - t0) / iters * 1e6)
    return statistics.median(samples)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repetitions", type=int, default=5)
    ap.add_argument("--min-time", type=float, default=0.2)
    ap.add_argument("--filter", default="")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda (the current GPU)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.set_default_device(args.device)
    timer = time_fn
    if args.device.startswith("cuda"):
        def timer(fn, repetitions, min_time):
            def run():
                fn()
                torch.cuda.synchronize()
            return time_fn(run, repetitions, min_time)
    rows = {
        "mul_128x784x256": lambda: mm_row(128, 784, 256),
        "mul_512x1024x1024": lambda: mm_row(512, 1024, 1024),
        "matmul_128x784x256": lambda: mm_row(128, 784, 256),
        "matmul_512x1024x1024": lambda: mm_row(512, 1024, 1024),
        "conv2d_b64_1to32_28x28_k5": lambda: conv_row(1, 32, 28),
        "conv2d_b64_32to64_14x14_k5": lambda: conv_row(32, 64, 14),
        "softmax_with_cross_entropy_512x1000": swce_row,
        "batch_norm_64x32x28x28": batch_norm_row,
    }
    result = {}
    for name, make in rows.items():
        if args.filter not in name:
            continue
        fwd, inputs = make()
        with torch.no_grad():
            result[name + "/fwd"] = timer(fwd, args.repetitions, args.min_time)
        out = fwd()
        seed = torch.ones_like(out)
        result[name + "/bwd"] = timer(
            lambda: torch.autograd.grad(out, inputs, seed, retain_graph=True),
            args.repetitions, args.min_time)
    if args.filter in "adam_1M":
        result["adam_1M/fwd"] = timer(adam_step(), args.repetitions, args.min_time)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
