"""Data parallelism across processes from Python (BuildStrategy.transport = "mpi"): N
processes under mpirun, each feeding its own uneven share of every global batch, end with
identical parameters equal to single-process training on the whole batch; misuse is a clear
error."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import loom as fluid
from loom import core

import test_data_parallel as dp

HERE = os.path.dirname(os.path.abspath(__file__))
STEPS = 8

needs_mpi = pytest.mark.skipif(
    not core.is_compiled_with_mpi() or shutil.which("mpirun") is None,
    reason="Loom built without MPI or no mpirun on PATH")


def single_process(steps, init):
    """Training on the whole batch from `init` (rank 0's initial values, which the MPI run
    broadcasts)."""
    main, startup, loss = dp.build("mlp", "adam")
    exe, scope = dp.fresh_scope(main, startup, init)
    for x, y in dp.batches("mlp", 10)[:steps]:
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    return {n: np.array(scope.find_var(n).get_tensor()) for n in dp.params_of(main)}


def run_mpi(tmp_path, n, mode):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
           os.path.join(HERE, "mpi_dp_worker.py"), str(tmp_path), mode, str(STEPS)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [dict(np.load(os.path.join(tmp_path, "rank%d.npz" % r))) for r in range(n)]


@needs_mpi
@pytest.mark.parametrize("n,mode", [(2, "allreduce"), (3, "allreduce"), (3, "owner")])
def test_mpi_ranks_agree_and_match_single_process(tmp_path, n, mode):
    ranks = run_mpi(tmp_path, n, mode)
    init = {k[len("init:"):]: v for k, v in ranks[0].items() if k.startswith("init:")}
    # Every rank started from values of its own; the startup's broadcast made them rank 0's.
    assert any(not np.array_equal(ranks[1]["init:" + k], v) for k, v in init.items())
    want = single_process(STEPS, init)
    for r in range(1, n):
        for name in want:
            np.testing.assert_array_equal(ranks[r][name], ranks[0][name],
                                          err_msg="rank %d %s" % (r, name))
    # Within 1e-5 relative (L2 over each parameter, as the in-process tests): the ranks sum
    # their weighted gradients in another order than one process sums the full batch.
    dp.assert_close({n: ranks[0][n] for n in want}, want, "%d processes, %s" % (n, mode))
    # Each rank fetched its own loss (its share of the batch), not one shared value.
    assert not all(np.array_equal(ranks[r]["losses"], ranks[0]["losses"]) for r in range(1, n))


def test_mpi_transport_outside_mpirun_is_a_clear_error():
    main, startup, loss = dp.build("mlp", "adam")
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.transport = "mpi"
    compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                              build_strategy=bs)
    x, y = dp.batches("mlp", 4)[0]
    env_keys = [k for k in os.environ if k.startswith(("OMPI_", "PMI_", "PMIX_"))]
    if env_keys:
        pytest.skip("running under mpirun")
    with pytest.raises(Exception, match="mpirun|without MPI"):
        exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    bs.transport = "mpi"
    compiled = fluid.CompiledProgram(main).with_data_parallel(
        loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(2))
    with pytest.raises(ValueError, match="one place per process"):
        exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    bs.transport = "carrier-pigeon"
    compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                              build_strategy=bs)
    with pytest.raises(ValueError, match="transport"):
        exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)


@needs_mpi
def test_an_uncaught_exception_on_one_rank_ends_the_job_at_once():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "2", sys.executable,
           os.path.join(HERE, "mpi_failing_worker.py")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=110)
    # The job ends (a two-minute collective timeout would have hit the subprocess timeout),
    # non-zero, with rank 1's own error on stderr.
    assert proc.returncode != 0
    assert "rank 1 cannot read its data" in proc.stderr, proc.stderr[-3000:]
    assert "rank 1: uncaught RuntimeError: ending the MPI job" in proc.stderr, proc.stderr[-3000:]


@needs_mpi
@pytest.mark.parametrize("n", [2, 3])
def test_ranks_with_different_learning_rates_fail_naming_the_variable(n):
    """Identical main programs, the learning rate in startup's fill_constant: rank 0 SGD(0.1),
    the others SGD(0.9). Every rank fails before its first step, naming the variable and the
    ranks; the same job with equal rates trains."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), sys.executable,
           os.path.join(HERE, "mpi_lr_worker.py")]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    # mpirun may join two ranks' lines: each rank's report is found anywhere in the output.
    want = ("rank 1 holds another value of persistable variable 'learning_rate_0' than rank 0 "
            "(rank 0: [0.1], rank 1: [0.9])")
    for r in range(n):
        assert ("rank %d failed: " % r) in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.count(want) == n, proc.stdout
    proc = subprocess.run(cmd + ["same"], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]
    assert proc.stdout.count("trained") == n
