"""What a branch costs: the same MLP step with its head written flat, or chosen by layers.cond
(two conditional_blocks, their gradient blocks and the copies out), on one place and
data-parallel on N CPU places; and the PyTorch equivalent (a Python `if`) for reference.

    PYTHONPATH=build/python /usr/bin/python3 bench/control_flow/cond_overhead.py [--steps 300]
"""
import argparse
import time

import numpy as np

import loom as fluid


def build(use_cond, hidden, batch_dim):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [batch_dim])
        y = fluid.layers.data("y", [1], dtype="int64")
        h = fluid.layers.fc(x, hidden, act="relu")
        if use_cond:
            logits = fluid.layers.cond(fluid.layers.reduce_mean(x) > -100.0,
                                       lambda: fluid.layers.fc(h, 10, name="head"),
                                       lambda: fluid.layers.fc(h, 10, name="other"))
        else:
            logits = fluid.layers.fc(h, 10, name="head")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.SGD(0.01).minimize(loss)
    return main, startup, loss


def steps_per_s(use_cond, places, args):
    main, startup, loss = build(use_cond, args.hidden, args.dim)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    prog = main
    if places > 1:
        prog = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, places=fluid.cpu_places(places))
    rng = np.random.RandomState(0)
    x = rng.randn(args.batch, args.dim).astype("float32")
    y = rng.randint(0, 10, size=(args.batch, 1)).astype("int64")
    for _ in range(20):
        exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    best = 0.0
    for _ in range(args.rounds):
        t = time.perf_counter()
        for _ in range(args.steps):
            exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        best = max(best, args.steps / (time.perf_counter() - t))
    return best


def torch_steps_per_s(use_cond, args):
    import torch
    torch.set_num_threads(2)
    torch.manual_seed(0)
    fc1, head, other = (torch.nn.Linear(args.dim, args.hidden), torch.nn.Linear(args.hidden, 10),
                        torch.nn.Linear(args.hidden, 10))
    params = list(fc1.parameters()) + list(head.parameters()) + list(other.parameters())
    opt = torch.optim.SGD(params, lr=0.01)
    rng = np.random.RandomState(0)
    x = torch.from_numpy(rng.randn(args.batch, args.dim).astype("float32"))
    y = torch.from_numpy(rng.randint(0, 10, size=(args.batch,)).astype("int64"))

    def step():
        h = torch.relu(fc1(x))
        logits = (head(h) if x.mean().item() > -100.0 else other(h)) if use_cond else head(h)
        loss = torch.nn.functional.cross_entropy(logits, y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(20):
        step()
    best = 0.0
    for _ in range(args.rounds):
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        best = max(best, args.steps / (time.perf_counter() - t))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--dim", type=int, default=784)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--places", type=int, default=4)
    ap.add_argument("--no-torch", action="store_true")
    args = ap.parse_args()
    print("MLP %d-%d-10, batch %d, best of %d rounds of %d steps (steps/s)"
          % (args.dim, args.hidden, args.batch, args.rounds, args.steps))
    print("%-28s %10s %10s %8s" % ("", "flat", "cond", "cond/flat"))
    for places in (1, args.places):
        flat, cond = steps_per_s(False, places, args), steps_per_s(True, places, args)
        print("%-28s %10.1f %10.1f %8.3f" % ("loom, %d place(s)" % places, flat, cond,
                                             cond / flat))
    if not args.no_torch:
        flat, cond = torch_steps_per_s(False, args), torch_steps_per_s(True, args)
        print("%-28s %10.1f %10.1f %8.3f" % ("pytorch (python if)", flat, cond, cond / flat))


if __name__ == "__main__":
    main()
