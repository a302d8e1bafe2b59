"""One rank of an MPI data-parallel job in which rank 1 raises an exception nobody catches after
the first step (started by test_mpi_data_parallel.py under mpirun). The job must end at once with
rank 1's error, not after the collective timeout.

    mpirun -np 2 python3 mpi_failing_worker.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_data_parallel as dp  # noqa: E402

import loom as fluid  # noqa: E402
from loom import core  # noqa: E402


def main():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    main_prog, startup, loss = dp.build("mlp", "sgd")
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.transport = "mpi"
    bs.collective_timeout_ms = 120000  # waiting for the timeout would take two minutes
    compiled = fluid.CompiledProgram(main_prog).with_data_parallel(loss_name=loss.name,
                                                                   build_strategy=bs)
    for step, (x, y) in enumerate(dp.batches("mlp", 8)[:3]):
        if rank == 1 and step == 1:
            raise RuntimeError("rank 1 cannot read its data")
        exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)


if __name__ == "__main__":
    main()
