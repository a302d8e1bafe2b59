"""One rank of a data-parallel MPI job whose ranks build different learning rates (rank 0
SGD(0.1), the others SGD(0.9)) into otherwise identical programs; started by
test_mpi_data_parallel.py under mpirun. Prints what the first step raised, if anything.

    mpirun -np N python3 mpi_lr_worker.py [same]   (same: every rank SGD(0.1))
"""
import os
import sys

import numpy as np

import loom as fluid


def main():
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    lr = 0.1 if rank == 0 or sys.argv[1:] == ["same"] else 0.9
    main_prog, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.program_guard(main_prog, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2))
        fluid.optimizer.SGD(lr).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    bs = fluid.BuildStrategy()
    bs.transport = "mpi"
    compiled = fluid.CompiledProgram(main_prog).with_data_parallel(
        loss_name=loss.name, build_strategy=bs)
    try:
        exe.run(compiled, feed={"x": np.ones([2, 3], "float32")}, fetch_list=[loss])
    except Exception as e:  # noqa: BLE001 - printed for the test
        print("rank %d failed: %s" % (rank, e), flush=True)
        return  # a clean exit: every rank reports before mpirun could end the job
    print("rank %d trained" % rank, flush=True)


if __name__ == "__main__":
    main()
