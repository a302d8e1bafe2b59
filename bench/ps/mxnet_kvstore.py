"""Push+pull round trip through MXNet's dist_sync parameter-server KVStore on loopback.

Run with the venv from bench/ps/install-mxnet.sh:
  /opt/venvs/mxnet/bin/python bench/ps/mxnet_kvstore.py
Starts a scheduler, 2 servers and 2 workers by hand (each its own DMLC_* environment), then
each worker pushes and pulls one float32 key per size. Prints one JSON line per size (worker 0)
and a table. MXNet defaults are kept: MXNET_KVSTORE_BIGARRAY_BOUND = 1e6 elements, so the
4 MiB and 64 MiB keys are sharded over both servers and the 4 KiB key lives on one.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4 << 10, 4 << 20, 64 << 20]  # bytes per key
WARMUP = 5
ITERS = {4 << 10: 50, 4 << 20: 50, 64 << 20: 10}
DEADLINE_S = 300  # the whole run, start to finish
NUM_SERVER = NUM_WORKER = 2


def worker():
    """One worker: init each key, then time push+pull round trips. Prints its results as JSON."""
    import mxnet as mx
    kv = mx.kv.create("dist_sync")
    results = []
    for key, nbytes in enumerate(SIZES):
        shape = (nbytes // 4,)
        arr, out = mx.nd.ones(shape), mx.nd.zeros(shape)
        kv.init(key, mx.nd.zeros(shape))
        times = []
        for i in range(WARMUP + ITERS[nbytes]):
            # On CPU MXNet reuses the pushed array as its receive buffer, so the pull overwrites
            # `arr` too; refill it (untimed) so every round pushes ones and values stay finite.
            arr[:] = 1
            arr.wait_to_read()
            t0 = time.perf_counter()
            kv.push(key, arr)
            kv.pull(key, out=out)
            out.wait_to_read()
            if i >= WARMUP:
                times.append(time.perf_counter() - t0)
        # Both workers push ones with no optimizer: the server stores their sum.
        assert out[0].asscalar() == NUM_WORKER, out[0].asscalar()
        med = statistics.median(times)
        results.append({"impl": "mxnet-dist_sync", "bytes": nbytes, "median_ms": med * 1e3,
                        "gbps_per_worker": 2 * nbytes / med / 1e9})
    print("RESULTS " + json.dumps({"rank": kv.rank, "results": results}), flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    end = time.monotonic() + DEADLINE_S
    base = dict(os.environ, DMLC_PS_ROOT_URI="127.0.0.1", DMLC_PS_ROOT_PORT=str(free_port()),
                DMLC_NUM_SERVER=str(NUM_SERVER), DMLC_NUM_WORKER=str(NUM_WORKER),
                DMLC_NODE_HOST="127.0.0.1",  # servers/workers bind their own free port on loopback
                PS_VERBOSE="0")
    # For role scheduler/server, `import mxnet` runs the server loop and exits when the workers
    # finish (mxnet/kvstore/kvstore_server.py, _init_kvstore_server_module).
    procs = [subprocess.Popen([sys.executable, "-c", "import mxnet"], env=dict(base, DMLC_ROLE=r))
             for r in ["scheduler"] + ["server"] * NUM_SERVER]
    workers = [subprocess.Popen([sys.executable, __file__, "--worker"],
                                env=dict(base, DMLC_ROLE="worker"), stdout=subprocess.PIPE, text=True)
               for _ in range(NUM_WORKER)]
    procs += workers
    try:
        by_rank = {}
        for w in workers:
            out, _ = w.communicate(timeout=max(1, end - time.monotonic()))
            if w.returncode != 0:
                sys.exit(f"mxnet_kvstore: worker pid {w.pid} exited {w.returncode}")
            res = json.loads(next(l for l in out.splitlines() if l.startswith("RESULTS "))[8:])
            by_rank[res["rank"]] = res["results"]
        for p in procs[:1 + NUM_SERVER]:  # scheduler and servers leave once the workers are gone
            p.wait(timeout=max(1, min(10, end - time.monotonic())))
    finally:
        for p in procs:  # on any failure or timeout: kill what is still running, by pid
            if p.poll() is None:
                p.kill()
                p.wait()
    for r in by_rank[0]:
        print(json.dumps(r))
    print(f"\n{'bytes':>10} {'median ms':>10} {'GB/s/worker':>12}   (worker 1: ms, GB/s)")
    for r0, r1 in zip(by_rank[0], by_rank[1]):
        print(f"{r0['bytes']:>10} {r0['median_ms']:>10.3f} {r0['gbps_per_worker']:>12.3f}"
              f"   ({r1['median_ms']:.3f}, {r1['gbps_per_worker']:.3f})")


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["--worker"] else main()
