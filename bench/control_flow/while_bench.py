"""What a loop costs: a recurrent cell h = tanh(h·W) applied T times, trained with SGD, as a
layers.while_loop, as the same T steps written out (unrolled), and in PyTorch (a Python for
loop, autograd through it).

    PYTHONPATH=build/python /usr/bin/python3 bench/control_flow/while_bench.py [--steps 200]
"""
import argparse
import time

import numpy as np

import loom as fluid


def build(use_loop, args):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [args.hidden])
        h = fluid.layers.fc(x, args.hidden, act="tanh")
        cell = fluid.ParamAttr(name="cell.w")
        step = lambda h: fluid.layers.fc(h, args.hidden, act="tanh", param_attr=cell,
                                         bias_attr=False)
        if use_loop:
            i = fluid.layers.fill_constant([1], "int64", 0)
            n = fluid.layers.fill_constant([1], "int64", args.t)
            _, h = fluid.layers.while_loop(
                lambda i, h: i < n,
                lambda i, h: [fluid.layers.increment(i, in_place=False), step(h)], [i, h])
        else:
            for _ in range(args.t):
                h = step(h)
        loss = fluid.layers.mean(fluid.layers.square(h))
        fluid.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss


def timed(step, args):
    for _ in range(10):
        step()
    best = 0.0
    for _ in range(args.rounds):
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        best = max(best, args.steps / (time.perf_counter() - t))
    return best


def loom_steps_per_s(use_loop, args):
    main, startup, loss = build(use_loop, args)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    x = np.random.RandomState(0).randn(args.batch, args.hidden).astype("float32")
    return timed(lambda: exe.run(main, feed={"x": x}, fetch_list=[loss], scope=scope), args)


def torch_steps_per_s(args):
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    enc = torch.nn.Linear(args.hidden, args.hidden)
    cell = torch.nn.Linear(args.hidden, args.hidden, bias=False)
    opt = torch.optim.SGD(list(enc.parameters()) + list(cell.parameters()), lr=0.01)
    x = torch.from_numpy(np.random.RandomState(0).randn(args.batch, args.hidden)
                         .astype("float32"))

    def step():
        h = torch.tanh(enc(x))
        for _ in range(args.t):
            h = torch.tanh(cell(h))
        loss = (h * h).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    return timed(step, args)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--t", type=int, default=20, help="iterations of the cell")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    print("cell %dx%d applied %d times, batch %d; training steps/s, best of %d rounds of %d"
          % (args.hidden, args.hidden, args.t, args.batch, args.rounds, args.steps))
    rows = [("loom while_loop", loom_steps_per_s(True, args)),
            ("loom unrolled", loom_steps_per_s(False, args))]
    if not args.no_torch:
        rows.append(("pytorch for loop", torch_steps_per_s(args)))
    for name, v in rows:
        print("%-20s %10.1f" % (name, v))


if __name__ == "__main__":
    main()
