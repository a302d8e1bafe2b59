"""Data-parallel training throughput: Loom on N CPU places (allreduce ring / tree / native /
auto, owner mode) vs one place, and PyTorch DistributedDataParallel (gloo, N processes) vs one
process, on the same models, global batch and machine. Prints one markdown table.

    PYTHONPATH=build/python /usr/bin/python3 bench/data_parallel/compare.py --places 4

Models: the Fashion-MNIST MLP (784-256-128-10) and CNN of examples/fashion_mnist.py (random
data of the same shapes), "many-small" (150 parameters: 75 fc layers 256x256 with biases, like
ResNet-50's many small gradients) and "few-large" (8 parameters: 4 fc layers 2048x2048 + biases,
VGG-like large gradients). Adam everywhere.
"""
import argparse
import os
import socket
import sys
import time

import numpy as np

MODELS = {
    # name: (input shape, classes)
    "mlp": ((784,), 10),
    "cnn": ((1, 28, 28), 10),
    "many-small": ((256,), 10),
    "few-large": ((2048,), 10),
}


def loom_model(fluid, name):
    main, startup = fluid.Program(), fluid.Program()
    shape, classes = MODELS[name]
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", list(shape))
        if name == "mlp":
            h = fluid.layers.fc(fluid.layers.fc(x, 256, act="relu"), 128, act="relu")
        elif name == "cnn":
            h = fluid.layers.conv2d(x, 32, 5, padding=2, act="relu")
            h = fluid.layers.pool2d(h, 2, "max", 2)
            h = fluid.layers.conv2d(h, 64, 5, padding=2, act="relu")
            h = fluid.layers.pool2d(h, 2, "max", 2)
            h = fluid.layers.fc(h, 256, act="relu")
        elif name == "many-small":
            h = x
            for _ in range(74):
                h = fluid.layers.fc(h, 256, act="relu")
        else:
            h = x
            for _ in range(3):
                h = fluid.layers.fc(h, 2048, act="relu")
        logits = fluid.layers.fc(h, classes)
        y = fluid.layers.data("y", [1], dtype="int64")
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Adam(1e-4).minimize(loss)
    return main, startup, loss


def batch(name, rows, seed=0):
    shape, classes = MODELS[name]
    rng = np.random.RandomState(seed)
    return (rng.rand(rows, *shape).astype("float32"),
            rng.randint(0, classes, size=(rows, 1)).astype("int64"))


def loom_steps_per_s(name, places, config, global_batch, steps, warmup=3):
    import loom as fluid
    main, startup, loss = loom_model(fluid, name)
    scope = fluid.core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    program = main
    if places > 1:
        bs = fluid.BuildStrategy()
        mode, algo = config
        bs.reduce_strategy = (fluid.BuildStrategy.ReduceStrategy.Reduce if mode == "owner"
                              else fluid.BuildStrategy.ReduceStrategy.AllReduce)
        bs.allreduce_algorithm = algo
        program = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(places))
    x, y = batch(name, global_batch)
    for _ in range(warmup):
        exe.run(program, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    t0 = time.perf_counter()
    for _ in range(steps):
        exe.run(program, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return steps / (time.perf_counter() - t0)


def loom_mpi_steps_per_s(name, places, global_batch, steps, loom_bin, mpirun):
    """Loom over MPI, one process per rank like DDP: the model saved as a bundle, transpiled with
    --transport mpi (allreduce, auto), trained by `mpirun -np N loom run`."""
    import re
    import shutil
    import subprocess
    import tempfile
    import loom as fluid
    main, startup, loss = loom_model(fluid, name)
    x, y = batch(name, global_batch)
    work = tempfile.mkdtemp(prefix="loom_dp_mpi_")
    try:
        bundle, out = os.path.join(work, "bundle"), os.path.join(work, "mpi")
        fluid.io.save_program_bundle(bundle, main, startup, ["x", "y"], [loss],
                                     data={"x": x, "y": y}, batch_size=global_batch)
        subprocess.run([loom_bin, "transpile", bundle, "-o", out, "--places", "cpu:%d" % places,
                        "--transport", "mpi"], check=True, stdout=subprocess.DEVNULL)

        def run(iters):
            r = subprocess.run([mpirun, "--oversubscribe", "--allow-run-as-root", "-np",
                                str(places), loom_bin, "run", out, "--iters", str(iters),
                                "--print-every", str(iters)], check=True, capture_output=True,
                               text=True)
            return float(re.search(r"done: \d+ iterations in ([0-9.]+) s", r.stdout).group(1))
        # The difference of two runs leaves out start-up and the first (warm-up) steps.
        short, full = run(3), run(3 + steps)
        return steps / max(full - short, 1e-9)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# ---- PyTorch ----

def torch_model(torch, name):
    nn = torch.nn
    shape, classes = MODELS[name]
    if name == "mlp":
        return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, classes))
    if name == "cnn":
        return nn.Sequential(nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(64 * 7 * 7, 256), nn.ReLU(),
                             nn.Linear(256, classes))
    layers, width = [], shape[0]
    depth, hidden = (74, 256) if name == "many-small" else (3, 2048)
    for _ in range(depth):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    layers.append(nn.Linear(width, classes))
    return nn.Sequential(*layers)


def torch_worker(rank, world, port, name, global_batch, steps, threads, out_path):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    model = torch_model(torch, name)
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                                world_size=world)
        model = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = batch(name, global_batch)
    share = np.array_split(np.arange(global_batch), world)[rank]
    xt, yt = torch.from_numpy(x[share]), torch.from_numpy(y[share, 0])
    lossf = torch.nn.CrossEntropyLoss()

    def step():
        opt.zero_grad()
        lossf(model(xt), yt).backward()
        opt.step()

    for _ in range(3):
        step()
    if world > 1:
        dist.barrier()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if world > 1:
        dist.barrier()
    rate = steps / (time.perf_counter() - t0)
    if rank == 0:
        with open(out_path, "w") as f:
            f.write(str(rate))
    if world > 1:
        dist.destroy_process_group()


def torch_steps_per_s(name, world, global_batch, steps):
    import tempfile
    import torch.multiprocessing as mp
    cores = len(os.sched_getaffinity(0))
    threads = max(1, cores // world)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with tempfile.NamedTemporaryFile(suffix=".rate") as f:
        mp.start_processes(torch_worker, args=(world, port, name, global_batch, steps, threads,
                                               f.name), nprocs=world, start_method="fork")
        return float(open(f.name).read())


def scope_bytes(core, scope):
    total = 0
    for name in scope.local_var_names():
        var = scope.find_var(name)
        if name.startswith("@") or not var.is_initialized():
            continue
        total += np.array(var.get_tensor()).nbytes
    return total


def memory_table(name, n):
    """Persistable bytes per rank after the per-rank startup programs ran (parameters plus
    optimizer state), allreduce vs owner mode."""
    import loom as fluid
    core = fluid.core
    main, startup, _ = loom_model(fluid, name)
    rows = []
    for mode in ("allreduce", "owner"):
        starts, mains, _ = core.transpile_data_parallel(startup.desc, main.desc, n, mode=mode,
                                                        group="mem-%s-%s" % (name, mode))
        scopes = [core.Scope() for _ in range(n)]
        runner = core.Runner(starts, mains, [core.Place.cpu(0)] * n, scopes)
        runner.startup()
        rows.append((mode, [scope_bytes(core, sc) for sc in scopes]))
    print("\nPersistable memory per place, %s with Adam on %d places (MiB):\n" % (name, n))
    print("| mode | " + " | ".join("place %d" % r for r in range(n)) + " | total |")
    print("|" + "---|" * (n + 2))
    for mode, b in rows:
        print("| %s | " % mode + " | ".join("%.1f" % (x / 2**20) for x in b) +
              " | %.1f |" % (sum(b) / 2**20))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--places", type=int, default=4)
    ap.add_argument("--models", default="mlp,cnn,many-small,few-large")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default: per model)")
    ap.add_argument("--batch", type=int, default=0, help="global batch (default: per model)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--repeat", type=int, default=1,
                    help="rounds over the Loom N-place configurations; the best of each is shown")
    ap.add_argument("--mpi", action="store_true",
                    help="add Loom over MPI (N processes, allreduce auto; needs mpirun and the "
                         "loom binary, see --loom)")
    ap.add_argument("--loom", default=os.path.join(os.path.dirname(__file__), "..", "..", "build",
                                                   "tools", "loom"),
                    help="the loom binary for --mpi")
    ap.add_argument("--memory", default="few-large",
                    help="model whose per-place memory (allreduce vs owner) is reported")
    args = ap.parse_args()
    n = args.places
    defaults = {"mlp": (256, 100), "cnn": (128, 5), "many-small": (64, 20), "few-large": (64, 5)}
    configs = [("allreduce", "ring"), ("allreduce", "tree"), ("allreduce", "native"),
               ("allreduce", "auto"),
               ("owner", "auto")]
    print("| model | global batch | Loom 1 place | " +
          " | ".join("Loom %d places %s%s" % (n, m if m == "owner" else "", "" if m == "owner"
                                              else a) for m, a in configs) +
          (" | Loom %d MPI procs auto" % n if args.mpi else "") +
          ("" if args.no_torch else " | PyTorch 1 proc | PyTorch DDP %d procs" % n) +
          " | best Loom %d / DDP |" % n)
    print("|" + "---|" * (4 + len(configs) + (1 if args.mpi else 0) +
                          (0 if args.no_torch else 3)))
    for name in args.models.split(","):
        gb, steps = defaults[name]
        gb, steps = args.batch or gb, args.steps or steps
        one = loom_steps_per_s(name, 1, None, gb, steps)
        # Best of --repeat rounds, the configurations interleaved, so that a noisy moment does
        # not favour one of them.
        multi = [0.0] * len(configs)
        for _ in range(args.repeat):
            multi = [max(m, loom_steps_per_s(name, n, c, gb, steps))
                     for m, c in zip(multi, configs)]
        row = [name, str(gb), "%.1f" % (one * gb)] + ["%.1f" % (r * gb) for r in multi]
        if args.mpi:
            row += ["%.1f" % (loom_mpi_steps_per_s(name, n, gb, steps, args.loom, "mpirun") * gb)]
        if not args.no_torch:
            t1 = torch_steps_per_s(name, 1, gb, steps)
            tn = torch_steps_per_s(name, n, gb, steps)
            row += ["%.1f" % (t1 * gb), "%.1f" % (tn * gb), "%.2fx" % (max(multi) / tn)]
        print("| " + " | ".join(row) + " |")
        sys.stdout.flush()
    print("\n(samples/s; %d cores; load average %.1f at the end)" %
          (len(os.sched_getaffinity(0)), os.getloadavg()[0]))
    if args.memory:
        memory_table(args.memory, n)


if __name__ == "__main__":
    main()
