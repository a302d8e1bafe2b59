"""Fluid's nccl2 (collective) mode: DistributeTranspilerConfig.mode = "nccl2", then
CompiledProgram.with_data_parallel with BuildStrategy.num_trainers / trainer_id, each trainer a
process (`loom launch --workers 2 --clients 1`): both end with the weights of one process training
on the union of their batches (float64, 1e-12)."""
import os
import subprocess
import sys

import numpy as np
import pytest

import loom as fluid
from loom import core

HERE = os.path.dirname(os.path.abspath(__file__))


def test_nccl2_trainers_equal_single_process_training(tmp_path):
    if not core.is_compiled_with_mpi() or subprocess.run("command -v mpirun",
                                                         shell=True).returncode != 0:
        pytest.skip("no MPI: nccl2 mode's trainers are not tested")
    from nccl2_worker import single_process
    build_dir = os.environ.get("LOOM_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))
    loom = os.path.abspath(os.path.join(build_dir, "tools", "loom"))
    path = os.path.dirname(os.path.dirname(os.path.abspath(fluid.__file__)))
    proc = subprocess.run([loom, "launch", "--workers", "2", "--clients", "1", "--timeout", "120",
                           "--", sys.executable, os.path.join(HERE, "nccl2_worker.py"),
                           str(tmp_path)],
                          capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONPATH=path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    want = single_process(2)
    for t in range(2):
        got = np.load(tmp_path / ("trainer%d.npz" % t))
        for n in got.files:
            np.testing.assert_allclose(got[n], want[n], rtol=1e-12, atol=1e-14,
                                       err_msg="%s, trainer %d" % (n, t))


def test_nccl2_mode_checks_its_arguments():
    main = fluid.Program()
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    with pytest.raises(ValueError, match="trainer_id 2 is not in 0..1"):
        t.transpile(2, program=main, trainers="127.0.0.1:1,127.0.0.1:2")
    config.mode = "collective"
    with pytest.raises(ValueError, match="not supported"):
        fluid.DistributeTranspiler(config=config)
