"""One rank of a data-parallel run with a sparse embedding gradient over MPI (started by
test_selected_rows.py under mpirun): trains the embedding model of that test on its uneven
share of every global batch and saves the table to OUT/rank<R>.npy.

    mpirun -np N python3 mpi_sparse_worker.py OUT ROWS OPT
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_selected_rows as t  # noqa: E402  (the model and the batches)

import loom as fluid  # noqa: E402
from loom import core  # noqa: E402


def main():
    out, rows, opt = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    main_prog, startup, loss = t._dp_build(rows, opt)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    bs = fluid.BuildStrategy()
    bs.transport = "mpi"
    compiled = fluid.CompiledProgram(main_prog).with_data_parallel(
        loss_name=loss.name, build_strategy=bs)
    core.reset_collective_op_stats()
    for ids, y in t._dp_data(rows):
        exe.run(compiled, feed={"ids": np.array_split(ids, size)[rank],
                                "y": np.array_split(y, size)[rank]},
                fetch_list=[loss], scope=scope)
    stats = core.collective_op_stats()
    np.save(os.path.join(out, "rank%d.npy" % rank), np.array(scope.find_var("table").get_tensor()))
    np.save(os.path.join(out, "stats%d.npy" % rank),
            np.array([stats["sparse_calls"], stats["sparse_dense_calls"]]))


if __name__ == "__main__":
    main()
