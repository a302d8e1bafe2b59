"""KVStore push of 4 arrays of 64 MiB (one per device) + pull to 4 outputs: Loom's local and
device stores beside MXNet 1.9.1's (mx.cpu(0..3) as the devices), and the memory-traffic bound
(4 inputs read + 4 outputs written at this machine's copy speed).

    PYTHONPATH=build/python /usr/bin/python3 bench/kvstore/compare.py
MXNet runs in the venv of bench/ps/install-mxnet.sh (${MXNET_VENV:-/opt/venvs/mxnet}) when it is
there. Prints one JSON line per measurement and a table; medians of ITERS rounds after WARMUP.
"""
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

N, DEVICES, WARMUP, ITERS = 16 << 20, 4, 3, 15  # 64 MiB of float32 per array


def timed(fn):
    for _ in range(WARMUP):
        fn()
    times = []
    for _ in range(ITERS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def mxnet(kind):
    import mxnet as mx
    kv = mx.kv.create(kind)
    vals = [mx.nd.ones(N, ctx=mx.cpu(i)) for i in range(DEVICES)]
    outs = [mx.nd.zeros(N, ctx=mx.cpu(i)) for i in range(DEVICES)]
    kv.init(0, mx.nd.zeros(N))

    def step():
        kv.push(0, vals)
        kv.pull(0, out=outs)
        mx.nd.waitall()
    return timed(step)


def loom(kind, fused=False):
    import loom.kvstore as kvs
    kv = kvs.create(kind)
    vals = [np.ones(N, "float32") for _ in range(DEVICES)]
    outs = [np.zeros(N, "float32") for _ in range(DEVICES)]
    kv.init(0, np.zeros(N, "float32"))
    if fused:
        return timed(lambda: kv.pushpull(0, vals, out=outs))

    def step():
        kv.push(0, vals)
        kv.pull(0, out=outs)
    return timed(step)


def bound():
    src, dst = np.ones(N, "float32"), np.zeros(N, "float32")
    ms = timed(lambda: np.copyto(dst, src))
    copy_gbps = 2 * src.nbytes / (ms / 1e3) / 1e9  # read + write
    return 2 * DEVICES * src.nbytes / (copy_gbps * 1e9) * 1e3, copy_gbps


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--mxnet":
        print(json.dumps({k: mxnet(k) for k in ("local", "device")}))
        return
    rows = []
    ms, gbps = bound()
    rows.append(("memory-traffic bound (copy %.1f GB/s)" % gbps, ms))
    venv = os.path.join(os.environ.get("MXNET_VENV", "/opt/venvs/mxnet"), "bin", "python")
    if os.path.exists(venv):
        out = subprocess.run([venv, __file__, "--mxnet"], capture_output=True, text=True,
                             timeout=600, env=dict(os.environ, PYTHONPATH=""))
        if out.returncode == 0:
            m = json.loads(out.stdout.strip().splitlines()[-1])
            rows += [("mxnet-1.9.1 local push+pull", m["local"]),
                     ("mxnet-1.9.1 device push+pull", m["device"])]
        else:
            print("MXNet failed:", out.stderr[-2000:], file=sys.stderr)
    rows += [("loom local push+pull", loom("local")), ("loom device push+pull", loom("device")),
             ("loom local pushpull (fused)", loom("local", True)),
             ("loom device pushpull (fused)", loom("device", True))]
    for name, value in rows:
        print(json.dumps({"what": name, "ms": round(value, 2)}))
    print("\n%-44s %8s" % ("4 x 64 MiB, push + pull to 4 outputs", "ms"))
    for name, value in rows:
        print("%-44s %8.1f" % (name, value))


if __name__ == "__main__":
    main()
