"""`loom launch --emulate`: jobs on an emulated cluster (one network namespace per node, shaped
veth NICs) run unchanged and give their one-machine results; every namespace is gone when the
job ends, fails, is stopped, or its launcher was SIGKILLed (the next launcher removes those);
bad input is a clear error. Needs root (the CI machine runs as root); skips where namespaces
cannot be made, saying why."""
import os
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

import loom as fluid
from loom import core

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("LOOM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
LOOM = os.path.abspath(os.path.join(BUILD, "tools", "loom"))
PYPATH = os.pathsep.join([os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__))),
                          HERE])


def launch(args, timeout=180, **kw):
    return subprocess.run([LOOM, "launch"] + args, capture_output=True, text=True,
                          timeout=timeout, env=dict(os.environ, PYTHONPATH=PYPATH), **kw)


def namespaces_of(pid):
    try:
        names = os.listdir("/var/run/netns")
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith("loom-%d-" % pid))


@pytest.fixture(scope="module")
def emulation():
    """Skips the module's cluster tests where this machine cannot make namespaces."""
    if shutil.which("ip") is None or shutil.which("tc") is None:
        pytest.skip("iproute2 (ip, tc) is not installed: no emulated cluster")
    probe = launch(["--emulate", "1:1gbit", "--", "true"], timeout=60)
    if probe.returncode != 0:
        pytest.skip("cannot make an emulated cluster here: " + probe.stderr.strip())


needs_mpi = pytest.mark.skipif(
    not core.is_compiled_with_mpi() or shutil.which("mpirun") is None,
    reason="Loom built without MPI or no mpirun on PATH")


def test_every_process_runs_on_its_node(emulation):
    """Servers and workers are spread over the nodes in blocks, each in its node's namespace
    with its node's name and addresses (one per NIC, one subnet per rail) and nothing else."""
    script = ('echo "$LOOM_ROLE $LOOM_RANK $(hostname) $LOOM_EMULATE_NODE $POD_IP '
              '$PADDLE_CURRENT_ENDPOINT $LOOM_LOCAL_PROCESSES"; ip -o -4 addr | '
              'sed -n "s/.* inet \\([0-9.]*\\).*/addr \\1/p"')
    proc = launch(["--emulate", "2x2:1gbit", "--workers", "4", "--servers", "2", "--", "sh",
                   "-c", script])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    for role, rank, node in [("server", 0, 0), ("server", 1, 1), ("worker", 0, 0),
                             ("worker", 1, 0), ("worker", 2, 1), ("worker", 3, 1)]:
        who = "[%s %d] " % (role, rank)
        port = 6170 + rank + (2 if role == "worker" else 0)
        assert who + "%s %d node%d %d 10.77.0.%d 10.77.0.%d:%d 6" % (
            role, rank, node, node, node + 1, node + 1, port) in lines, proc.stdout
        addrs = sorted(l[len(who) + 5:] for l in lines if l.startswith(who + "addr "))
        assert addrs == ["10.77.0.%d" % (node + 1), "10.77.1.%d" % (node + 1), "127.0.0.1"]


@needs_mpi
def test_data_parallel_across_four_nodes_equals_one_process(emulation, tmp_path):
    """Fluid's nccl2 mode, four trainers on four emulated nodes, one MPI world whose mpirun
    reaches the other nodes through the namespace agent: every trainer ends with the weights of
    one process training on the union of the batches (float64, 1e-12)."""
    from nccl2_worker import single_process
    proc = launch(["--emulate", "4x1:1gbit", "--workers", "4", "--clients", "1", "--timeout",
                   "150", "--", sys.executable, os.path.join(HERE, "nccl2_worker.py"),
                   str(tmp_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = single_process(4)
    for t in range(4):
        got = np.load(tmp_path / ("trainer%d.npz" % t))
        for n in got.files:
            np.testing.assert_allclose(got[n], want[n], rtol=1e-12, atol=1e-14,
                                       err_msg="%s, trainer %d" % (n, t))


@needs_mpi
def test_hybrid_job_across_two_nodes_equals_one_process(emulation, tmp_path):
    """Parameter servers on both nodes and one MPI client of four workers spanning them
    (float64): the weights of one process training on the union, to 1e-12."""
    from hybrid_worker import ROWS, STEPS
    from pserver_util import batches, train_reference
    proc = launch(["--emulate", "2x1:1gbit", "--workers", "4", "--servers", "2", "--clients",
                   "1", "--timeout", "150", "--", sys.executable,
                   os.path.join(HERE, "hybrid_worker.py"), str(tmp_path), "--opt", "adam"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for server in range(2):
        assert re.search(r"pserver %d \(10\.77\.0\.%d:%d\)" % (server, server + 1, 6170 + server),
                         proc.stderr), proc.stderr
    got = [np.load(tmp_path / ("worker%d.npz" % w)) for w in range(4)]
    init = {k[5:]: got[0][k] for k in got[0].files if k.startswith("init/")}
    ref, _ = train_reference(init, batches(STEPS, ROWS, "float64", seed=5),
                             {"opt": "adam", "dtype": "float64"})
    for w in range(4):
        for n, want in ref.items():
            np.testing.assert_allclose(got[w]["final/" + n], want, rtol=1e-12, atol=1e-12,
                                       err_msg="%s of worker %d" % (n, w))


def started(args):
    """A launcher as a Popen, stopped (SIGTERM: it removes its cluster, then SIGKILL) by
    stop_launcher whatever the test found."""
    return subprocess.Popen([LOOM, "launch"] + args, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def stop_launcher(proc):
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_a_failed_job_and_a_stopped_one_leave_no_namespace(emulation):
    proc = started(["--emulate", "3:100mbit", "--workers", "3", "--",
                    "sh", "-c", 'test "$LOOM_RANK" != 1 || exit 7; sleep 60'])
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        stop_launcher(proc)
    assert proc.returncode == 1, out + err
    assert "worker 1 on node1 exited with code 7" in err
    assert namespaces_of(proc.pid) == []
    # SIGTERM to the launcher: the job is stopped, the cluster removed.
    proc = started(["--emulate", "2:100mbit", "--workers", "2", "--",
                    "sh", "-c", "echo up; sleep 60"])
    try:
        assert proc.stdout.readline().endswith("up\n")
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        stop_launcher(proc)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert namespaces_of(proc.pid) == []


def test_a_sigkilled_launchers_cluster_is_removed_by_the_next(emulation):
    proc = subprocess.Popen([LOOM, "launch", "--emulate", "2:100mbit", "--workers", "2", "--",
                             "sh", "-c", "echo up; sleep 60"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().endswith("up\n")
        assert namespaces_of(proc.pid) == ["loom-%d-n0" % proc.pid, "loom-%d-n1" % proc.pid,
                                           "loom-%d-sw" % proc.pid]
        proc.kill()
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(namespaces_of(proc.pid)) == 3  # what a SIGKILLed launcher leaves
    nxt = launch(["--emulate", "1:1gbit", "--", "true"], timeout=60)
    assert nxt.returncode == 0, nxt.stderr
    assert re.search(r"removed \d+ network namespaces of launchers that are gone", nxt.stderr)
    assert namespaces_of(proc.pid) == []


@pytest.mark.parametrize("spec,field", [
    ("0x1:1gbit", "nodes '0'"), ("2x9:1gbit", "nics '9'"), ("2:fast", "rate 'fast'"),
    ("2:1gbit:loss=101", "loss '101'"), ("2:1gbit:delay=-1us", "delay '-1us'"),
    ("2", "expected NODES[xNICS]:RATE"),
    ("2:1gbit:colour=red", "colour")])
def test_a_malformed_spec_is_an_error_naming_the_field(spec, field):
    proc = launch(["--emulate", spec, "--", "true"], timeout=30)
    assert proc.returncode == 2, proc.stderr
    assert field in proc.stderr and spec in proc.stderr, proc.stderr


def test_without_root_it_says_what_is_missing(tmp_path):
    if os.geteuid() != 0:
        proc = launch(["--emulate", "2:1gbit", "--", "true"], timeout=30)
    else:
        def drop():  # nobody, with no capabilities left
            os.setgroups([])
            os.setgid(65534)
            os.setuid(65534)
        proc = launch(["--emulate", "2:1gbit", "--", "true"], timeout=30, preexec_fn=drop,
                      cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stderr
    assert "needs CAP_NET_ADMIN and CAP_SYS_ADMIN" in proc.stderr, proc.stderr
    assert "run loom launch as root" in proc.stderr


@needs_mpi
def test_topo_sees_the_nodes_and_nics_of_an_mpi_world_across_nodes(emulation):
    """`loom topo --mpi` under one MPI world across the emulated nodes: every rank describes
    its host, and the nodes, their ranks and their NICs (at the emulated rate) come out, with a
    link matrix that keeps each node's ranks together."""
    proc = launch(["--emulate", "2x2:1gbit", "--workers", "4", "--clients", "1", "--no-prefix",
                   "--", LOOM, "topo", "--mpi"], timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "# 4 ranks on 2 nodes" in out, out
    assert "0  node0  0,1  eth0=10.77.0.1@1Gb eth1=10.77.1.1@1Gb" in out, out
    assert "1  node1  2,3  eth0=10.77.0.2@1Gb eth1=10.77.1.2@1Gb" in out, out
    assert "# transport: mpi+shm+nodes (the node-hierarchical allreduce" in out, out
    rows = [l.split() for l in out.splitlines()
            if re.match(r"^\s+\d(\s+[-\d]){4}\s*$", l)]
    assert rows[0][1:] == ["-", "2", "1", "1"], out
    assert rows[2][1:] == ["1", "1", "-", "2"], out


@pytest.mark.parametrize("kind,workers,servers,clients", [
    ("dist_sync", 2, 2, 0), ("dist_sync_mpi", 4, 2, 1)])
def test_kvstore_training_across_nodes_equals_one_process(emulation, tmp_path, kind, workers,
                                                          servers, clients):
    """MXNet-style KVStores across two emulated nodes (servers on both; with dist_sync_mpi one
    MPI client spanning them): every worker ends with the weights of one process running SGD
    on the union of the batches (float64, 1e-12)."""
    if clients and (not core.is_compiled_with_mpi() or shutil.which("mpirun") is None):
        pytest.skip("Loom built without MPI or no mpirun on PATH")
    from kvstore_sgd_worker import single_process
    proc = launch(["--emulate", "2x1:1gbit", "--workers", str(workers), "--servers",
                   str(servers), "--clients", str(clients), "--timeout", "150", "--",
                   sys.executable, os.path.join(HERE, "kvstore_sgd_worker.py"), kind,
                   str(tmp_path)])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = [np.load(tmp_path / ("worker%d.npz" % r)) for r in range(workers)]
    for n, want in single_process(workers).items():
        for r in range(workers):
            np.testing.assert_allclose(got[r][n], want, rtol=1e-12, atol=1e-14,
                                       err_msg="%s of worker %d" % (n, r))


@needs_mpi
def test_auto_across_nodes_leaves_out_what_was_tuned_for_one_host(emulation):
    """Over MPI ranks on several nodes, auto runs neither the star, the direct algorithm nor
    MPI's own collectives (tuned between the processes of one host); with two ranks on each
    node its native allreduce is the node-hierarchical one (shared memory inside each node,
    the shards across), and every call is exact."""
    proc = launch(["--emulate", "2x1:1gbit", "--workers", "4", "--clients", "1", "--no-prefix",
                   "--", LOOM, "bench", "collective", "--algo", "auto", "-b", "16K", "-e", "4M",
                   "-f", "4", "-n", "2", "-w", "1"], timeout=180)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 ranks (mpi+shm+nodes)" in proc.stdout, proc.stdout
    rows = [l.split() for l in proc.stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\s", l)]
    assert len(rows) == 5, proc.stdout
    for row in rows:
        assert row[4].startswith("auto:"), row
        assert row[4] not in ("auto:star", "auto:direct"), proc.stdout
        assert row[-1] == "0", proc.stdout  # #wrong


@needs_mpi
@pytest.mark.parametrize("op", ["sum", "avg", "max", "prod"])
def test_node_hierarchical_allreduce_is_exact(emulation, op):
    """The node-hierarchical allreduce on 2 nodes x 2 ranks and on 2 nodes x 3 ranks: every
    algorithm, native (hierarchical) among them, in float64 from 1 element to sizes whose
    shards end mid-block, checked element by element against the reference on every rank."""
    for workers in (4, 6):
        proc = launch(["--emulate", "2x1:1gbit", "--workers", str(workers), "--clients", "1",
                       "--no-prefix", "--", LOOM, "bench", "collective", "--algo", "all",
                       "-d", "fp64", "--redop", op, "-b", "8", "-e", "3000000", "-f", "13",
                       "-n", "2", "-w", "1"], timeout=240)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "%d ranks (mpi+shm+nodes)" % workers in proc.stdout, proc.stdout
        rows = [l.split() for l in proc.stdout.splitlines() if re.match(r"^\s+\d+\s+\d+\s", l)]
        assert any(r[4] == "native" for r in rows), proc.stdout
        for row in rows:
            assert row[-1] == "0", proc.stdout  # #wrong
