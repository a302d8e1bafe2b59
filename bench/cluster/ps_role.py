"""One process of a parameter-server push+pull job on an emulated cluster (bench/cluster/ps.sh),
run as the command of `loom launch --emulate ... --servers S --workers N`: its role and index
come from LOOM_ROLE and LOOM_RANK, and the job's shape from the launcher's variables.

    ps_role.py loom  BYTES ITERS WARMUP   (/usr/bin/python3, PYTHONPATH=build/python)
    ps_role.py mxnet BYTES ITERS WARMUP   (the MXNet venv's python, bench/ps/install-mxnet.sh)

loom: Loom's parameter servers, as bench/ps/loom_ps_bench.py runs them (the transpiled trainer
program cut down to its send/recv ops; the servers listen at PADDLE_PSERVER_ENDPOINTS).

mxnet: MXNet's dist_sync KVStore (ps-lite) with the worker of bench/ps/mxnet_kvstore.py. Each
process takes its ps-lite role from LOOM_ROLE; server 0 also starts the scheduler beside it, on
its node, at the first server's address (DMLC_PS_ROOT_URI) and port MXNET_ROOT_PORT (9091);
every process announces its node's address (POD_IP) as DMLC_NODE_HOST.

Each worker prints one line "RESULT {json}" with the median round trip of one key of BYTES
bytes (float32) over ITERS timed rounds after WARMUP untimed ones.
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "ps"))


def loom(nbytes, iters, warmup):
    import loom_ps_bench as bench
    bench.SIZES, bench.ITERS, bench.WARMUP = [nbytes], {nbytes: iters}, warmup
    eps = os.environ["PADDLE_PSERVER_ENDPOINTS"].split(",")
    bench.run(os.environ["LOOM_ROLE"], int(os.environ["LOOM_RANK"]), eps,
              int(os.environ["PADDLE_TRAINERS_NUM"]))


def mxnet(nbytes, iters, warmup):
    role, rank = os.environ["LOOM_ROLE"], int(os.environ["LOOM_RANK"])
    first_server = os.environ["PADDLE_PSERVER_ENDPOINTS"].split(",")[0].rsplit(":", 1)[0]
    os.environ.update(DMLC_PS_ROOT_URI=first_server,
                      DMLC_PS_ROOT_PORT=os.environ.get("MXNET_ROOT_PORT", "9091"),
                      DMLC_NUM_SERVER=os.environ["PADDLE_PSERVER_NUM"],
                      DMLC_NUM_WORKER=os.environ["PADDLE_TRAINERS_NUM"],
                      DMLC_NODE_HOST=os.environ["POD_IP"], PS_VERBOSE="0")
    if role == "worker":
        os.environ["DMLC_ROLE"] = "worker"
        import mxnet_kvstore as bench
        bench.SIZES, bench.ITERS, bench.WARMUP = [nbytes], {nbytes: iters}, warmup
        bench.NUM_WORKER = int(os.environ["PADDLE_TRAINERS_NUM"])
        bench.worker()  # prints "RESULTS {...}"
        return
    scheduler = None
    if rank == 0:
        # The scheduler leaves when the workers finish, as the servers do; the launcher's stop
        # (its process group) and the wait below bound it otherwise.
        scheduler = subprocess.Popen([sys.executable, "-c", "import mxnet"],
                                     env=dict(os.environ, DMLC_ROLE="scheduler"))
    os.environ["DMLC_ROLE"] = "server"
    try:
        import mxnet  # noqa: F401  (for role server, the import runs the server until the end)
    finally:
        if scheduler is not None:
            try:
                scheduler.wait(timeout=30)
            except subprocess.TimeoutExpired:
                scheduler.kill()
                scheduler.wait()
                sys.exit("ps_role.py: the ps-lite scheduler did not exit; killed it")
            if scheduler.returncode != 0:
                sys.exit("ps_role.py: the ps-lite scheduler exited %d" % scheduler.returncode)


if __name__ == "__main__":
    impl, nbytes, iters, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    {"loom": loom, "mxnet": mxnet}[impl](nbytes, iters, warmup)
