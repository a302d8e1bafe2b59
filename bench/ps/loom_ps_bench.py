"""Push+pull round trip through Loom's parameter servers on loopback, side by side with
mxnet_kvstore.py (same sizes, 2 workers x 2 servers, float32).

    PYTHONPATH=build/python /usr/bin/python3 bench/ps/loom_ps_bench.py

For each size, a parameter w of that many bytes is transpiled for 2 servers (sliced as Fluid
slices it: 4 KiB stays one block on one server, 4 MiB and 64 MiB become a block on each) and
every worker's trainer program is cut down to its parameter-server ops: split_byref + send of
the gradient, send_barrier, recv + concat of the parameter, fetch_barrier. One iteration is one
step of sync training without the model's compute: the servers merge both workers' gradients,
run SGD on their blocks and send the blocks back. Prints one JSON line per size (worker 0) and
a table; GB/s per worker = 2 x bytes / median round trip (as for MXNet).
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 4 << 20, 64 << 20]
WARMUP = 5
ITERS = {4 << 10: 200, 4 << 20: 50, 64 << 20: 10}
DEADLINE_S = 300
RPC_OPS = {"split_byref", "send", "send_barrier", "recv", "concat", "fetch_barrier"}


def build(nbytes):
    import loom as fluid
    main, startup = fluid.Program(), fluid.Program()
    rows = max(1, nbytes // 4096)
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        w = fluid.layers.create_parameter([rows, 1024], "float32", name="w")
        loss = fluid.layers.mean(w)
        fluid.optimizer.SGD(0.0).minimize(loss)
    return main, startup


def run(role, index, eps, trainers):
    import numpy as np
    import loom as fluid
    results = []
    for nbytes in SIZES:
        main, startup = build(nbytes)
        t = fluid.DistributeTranspiler()
        t.transpile(index if role == "worker" else 0, program=main, pservers=",".join(eps),
                    trainers=trainers, startup_program=startup)
        exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        if role == "server":
            prog, pstart = t.get_pserver_programs(eps[index])
            exe.run(pstart, scope=scope)
            exe.run(prog, scope=scope)
            continue
        exe.run(startup, scope=scope)
        prog = t.get_trainer_program()
        block = prog.global_block()
        for i in reversed(range(len(block.ops))):
            if block.ops[i].type not in RPC_OPS:
                block._remove_op(i)
        # The gradient is the scope's (no backward runs): a persistable the executor binds.
        block.var("w@GRAD").persistable = True
        grad = scope.var("w@GRAD").get_tensor()
        grad.set(np.ones([max(1, nbytes // 4096), 1024], "float32"), fluid.CPUPlace())
        times = []
        for i in range(WARMUP + ITERS[nbytes]):
            t0 = time.perf_counter()
            exe.run(prog, scope=scope)
            if i >= WARMUP:
                times.append(time.perf_counter() - t0)
        exe.close()
        med = statistics.median(times)
        results.append({"impl": "loom-pserver-sync", "bytes": nbytes,
                        "median_ms": round(med * 1e3, 3),
                        "gbps_per_worker": round(2 * nbytes / med / 1e9, 3)})
    if role == "worker":
        print("RESULT " + json.dumps(results), flush=True)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def main():
    if len(sys.argv) > 1:
        role, index = sys.argv[1], int(sys.argv[2])
        run(role, index, sys.argv[3].split(","), int(sys.argv[4]))
        return
    eps = ["127.0.0.1:%d" % free_port() for _ in range(2)]
    env = dict(os.environ, LOOM_PS_SECRET=os.environ.get("LOOM_PS_SECRET", "bench-secret"))
    procs = []
    try:
        for role, n in (("server", 2), ("worker", 2)):
            for i in range(n):
                procs.append(subprocess.Popen(
                    [sys.executable, __file__, role, str(i), ",".join(eps), "2"], env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
        deadline = time.time() + DEADLINE_S
        outs = []
        for p in procs:
            out, _ = p.communicate(timeout=max(1, deadline - time.time()))
            if p.returncode != 0:
                raise SystemExit("a bench process failed (exit %d):\n%s" % (p.returncode, out))
            outs.append(out)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    per_worker = [json.loads(l[7:]) for o in outs for l in o.splitlines() if l.startswith("RESULT ")]
    for r in per_worker[0]:
        print(json.dumps(r))
    print("%10s %12s %16s %16s" % ("bytes", "median ms", "GB/s worker 0", "GB/s worker 1"))
    for a, b in zip(per_worker[0], per_worker[1]):
        print("%10d %12.3f %16.3f %16.3f" % (a["bytes"], a["median_ms"], a["gbps_per_worker"],
                                              b["gbps_per_worker"]))


if __name__ == "__main__":
    main()
