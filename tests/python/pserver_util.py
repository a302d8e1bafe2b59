"""Helpers of the parameter-server tests: a small model, free ports, and a whole job (servers
and trainers) run as threads of this process, each with its own scope and executor."""
import os
import socket
import threading
import time

import numpy as np

import loom as fluid

os.environ.setdefault("LOOM_PS_SECRET", "test-secret")


def free_ports(n):
    """n ports free now, below the kernel's ephemeral range (32768 and up), so that no outgoing
    connection of another test takes one before its server binds it."""
    import random
    rng, ports = random.Random(), []
    while len(ports) < n:
        port = rng.randrange(20000, 32000)
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        if port not in ports:
            ports.append(port)
    return ["127.0.0.1:%d" % p for p in ports]


def build(opt="sgd", dtype="float32", decay=False, hidden=6, lr=0.1):
    """An MLP regression: (main, startup, loss, param names). Same names on every call. `lr`:
    SGD's and Momentum's learning rate (the decay's start)."""
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 7
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[4], dtype=dtype)
        y = fluid.layers.data(name="y", shape=[1], dtype=dtype)
        h = fluid.layers.fc(x, size=hidden, act="relu")
        p = fluid.layers.fc(h, size=1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(p, y))
        lr = fluid.layers.exponential_decay(lr, decay_steps=2, decay_rate=0.5) if decay else lr
        if opt == "sgd":
            o = fluid.optimizer.SGD(lr)
        elif opt == "momentum":
            o = fluid.optimizer.Momentum(lr, momentum=0.9)
        else:
            o = fluid.optimizer.Adam(lr if decay else 0.01)
        o.minimize(loss)
    params = [p.name for p in main.all_parameters()]
    return main, startup, loss, params


def batches(steps, rows, dtype="float32", seed=0):
    rng = np.random.RandomState(seed)
    return [(rng.randn(rows, 4).astype(dtype), rng.randn(rows, 1).astype(dtype))
            for _ in range(steps)]


def value(scope, name):
    return np.array(scope.find_var(name).get_tensor())


def run_job(servers, trainers, feeds, config=None, sync=True, model=None, timeout=60,
            applied=None):
    """Runs a job: feeds[k] is trainer k's list of (x, y) batches. Returns (per-trainer losses,
    trainer 0's initial parameters (fetched at startup), trainer 0's final parameters, errors).
    applied, when a dict, gets per server i (blocks: the gradient blocks server i owns,
    per_trainer: the gradient blocks it applied from each trainer, as listen_and_serv counts)."""
    model = model or {}
    eps = free_ports(servers)
    cfg = config or fluid.DistributeTranspilerConfig()
    errors, losses, init, final = [], {}, {}, {}

    def server(i):
        try:
            main, startup, _, _ = build(**model)
            t = fluid.DistributeTranspiler(cfg)
            t.transpile(0, program=main, pservers=",".join(eps), trainers=trainers,
                        sync_mode=sync, startup_program=startup)
            prog, pstart = t.get_pserver_programs(eps[i])
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(pstart, scope=scope)
            scope.var("@LOOM_PS_UPDATES@")  # where listen_and_serv leaves its update counts
            exe.run(prog, scope=scope)
            if applied is not None:
                serv = prog.global_block().ops[0]
                applied[i] = {"blocks": len(serv.attr("grad_blocks")),
                              "per_trainer": value(scope, "@LOOM_PS_UPDATES@").tolist()}
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append(("server %d" % i, e))

    def trainer(k):
        try:
            main, startup, loss, params = build(**model)
            t = fluid.DistributeTranspiler(cfg)
            t.transpile(k, program=main, pservers=",".join(eps), trainers=trainers,
                        sync_mode=sync, startup_program=startup)
            exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
            exe.run(startup, scope=scope)
            if k == 0:
                init.update({n: value(scope, n) for n in params})
            prog = t.get_trainer_program()
            out = []
            for x, y in feeds[k]:
                out.append(float(exe.run(prog, feed={"x": x, "y": y}, fetch_list=[loss],
                                         scope=scope)[0][0]))
            losses[k] = out
            if k == 0:
                final.update({n: value(scope, n) for n in params})
            exe.close()
        except Exception as e:  # noqa: BLE001
            errors.append(("trainer %d" % k, e))

    threads = [threading.Thread(target=server, args=(i,), daemon=True) for i in range(servers)]
    threads += [threading.Thread(target=trainer, args=(k,), daemon=True) for k in range(trainers)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + timeout
    for th in threads:
        th.join(max(0.0, deadline - time.monotonic()))
        assert not th.is_alive(), ("the job did not finish within %d s; errors so far: %r"
                                   % (timeout, errors))
    return losses, init, final, errors


def train_reference(init, steps, model=None):
    """Single-process training from init on the given per-step (x, y) batches; returns the
    parameters after each step's update (the last)."""
    model = model or {}
    main, startup, loss, params = build(**model)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    for n, v in init.items():
        scope.find_var(n).get_tensor().set(v, fluid.CPUPlace())
    losses = []
    for x, y in steps:
        losses.append(float(exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss],
                                    scope=scope)[0][0]))
    return {n: value(scope, n) for n in params}, losses
