"""A trainer of Fluid's nccl2 (collective) mode, started by `loom launch --workers N --clients 1`:
the DistributeTranspiler in mode "nccl2", then CompiledProgram.with_data_parallel with
BuildStrategy.num_trainers / trainer_id; each trainer trains on its rows of every global batch
and writes its final weights to OUT/trainer<id>.npz.

    loom launch --workers 2 --clients 1 -- python3 nccl2_worker.py OUT
"""
import os
import sys

import numpy as np

import loom as fluid

STEPS, ROWS = 4, 3


def build():
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data("x", [4], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="float64")
        h = fluid.layers.fc(x, 5, act="tanh")
        loss = fluid.layers.mean(fluid.layers.square_error_cost(fluid.layers.fc(h, 1), y))
        fluid.optimizer.SGD(0.2).minimize(loss)
    return main, startup, loss


def batches(trainers):
    rng = np.random.RandomState(1)
    return [(rng.randn(ROWS * trainers, 4), rng.randn(ROWS * trainers, 1)) for _ in range(STEPS)]


def single_process(trainers):
    """The parameters of one process training on the union of `trainers` trainers' batches,
    by name: what every trainer must end with."""
    main_prog, startup, loss = build()
    with fluid.scope_guard(fluid.Scope()):
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup)
        for x, y in batches(trainers):
            exe.run(main_prog, feed={"x": x, "y": y}, fetch_list=[loss])
        scope = fluid.global_scope()
        return {p.name: np.array(scope.find_var(p.name).get_tensor())
                for p in main_prog.all_parameters()}


def main():
    out_dir = sys.argv[1]
    trainer_id = int(os.environ["PADDLE_TRAINER_ID"])
    trainers = int(os.environ["PADDLE_TRAINERS_NUM"])
    main_prog, startup, loss = build()
    config = fluid.DistributeTranspilerConfig()
    config.mode = "nccl2"
    t = fluid.DistributeTranspiler(config=config)
    t.transpile(trainer_id, program=main_prog, startup_program=startup,
                trainers=os.environ["PADDLE_TRAINER_ENDPOINTS"],
                current_endpoint=os.environ["PADDLE_CURRENT_ENDPOINT"])
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    bs = fluid.BuildStrategy()
    bs.num_trainers, bs.trainer_id = trainers, trainer_id
    compiled = fluid.CompiledProgram(t.get_trainer_program()).with_data_parallel(
        loss_name=loss.name, build_strategy=bs)
    for x, y in batches(trainers):
        rows = slice(trainer_id * ROWS, (trainer_id + 1) * ROWS)
        exe.run(compiled, feed={"x": x[rows], "y": y[rows]}, fetch_list=[loss])
    scope = fluid.global_scope()
    params = [p.name for p in main_prog.all_parameters()]
    np.savez(os.path.join(out_dir, "trainer%d.npz" % trainer_id),
             **{n: np.array(scope.find_var(n).get_tensor()) for n in params})


if __name__ == "__main__":
    main()
