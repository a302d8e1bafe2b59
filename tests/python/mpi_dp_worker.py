"""One rank of a data-parallel run over MPI (started by test_mpi_data_parallel.py under
mpirun): builds the MLP, initializes it with a seed of its own (the compiled program's startup
broadcasts rank 0's parameters), trains on its share of each global batch and saves every
parameter, before ("init:NAME") and after training, to OUT/rank<R>.npz.

    mpirun -np N python3 mpi_dp_worker.py OUT MODE STEPS
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_data_parallel as dp  # noqa: E402  (the model and the batches of the in-process tests)

import loom as fluid  # noqa: E402
from loom import core  # noqa: E402


def main():
    out, mode, steps = sys.argv[1], sys.argv[2], int(sys.argv[3])
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    size = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    # Different initial values on every rank (the seed is written into the initializers).
    main_prog, startup, loss = dp.build("mlp", "adam", seed=100 + rank)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    init = {"init:" + n: np.array(scope.find_var(n).get_tensor())
            for n in dp.params_of(main_prog)}
    bs = fluid.BuildStrategy()
    bs.transport = "mpi"
    if mode == "owner":
        bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
    compiled = fluid.CompiledProgram(main_prog).with_data_parallel(
        loss_name=loss.name, build_strategy=bs)
    losses = []
    for x, y in dp.batches("mlp", 10)[:steps]:
        # Uneven shares: 10 rows over `size` ranks, as numpy.array_split cuts them.
        xs, ys = np.array_split(x, size)[rank], np.array_split(y, size)[rank]
        lv, = exe.run(compiled, feed={"x": xs, "y": ys}, fetch_list=[loss], scope=scope)
        losses.append(float(np.asarray(lv).reshape(-1)[0]))
    params = {n: np.array(scope.find_var(n).get_tensor()) for n in dp.params_of(main_prog)}
    np.savez(os.path.join(out, "rank%d.npz" % rank), losses=np.array(losses), **params, **init)


if __name__ == "__main__":
    main()
