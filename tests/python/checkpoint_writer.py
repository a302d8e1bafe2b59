"""Saves a checkpoint whose every variable holds one value, for test_checkpoint_kill.py (which
kills this process in the middle of the save).

    python3 checkpoint_writer.py DIR VALUE params|inference

Prints "saving" just before the save starts and "saved SECONDS" when it is complete."""
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import loom as fluid  # noqa: E402

PARAMS, ROWS, COLS = 12, 512, 512  # 12 x 1 MiB of float32


def build():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.unique_name.guard(), fluid.program_guard(main, startup):
        x = fluid.layers.data(name="x", shape=[COLS], dtype="float32")
        out = x
        for i in range(PARAMS):
            w = fluid.layers.create_parameter([ROWS, COLS], "float32", name="w%d" % i)
            out = fluid.layers.elementwise_add(out, fluid.layers.reduce_sum(w, dim=0))
        y = fluid.layers.mean(out)
    return main, startup, y


def main():
    dirname, value, kind = sys.argv[1], float(sys.argv[2]), sys.argv[3]
    prog, startup, y = build()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    scope = fluid.global_scope()
    for i in range(PARAMS):
        scope.find_var("w%d" % i).get_tensor().set(
            np.full([ROWS, COLS], value, "float32"), fluid.CPUPlace())
    print("saving", flush=True)
    start = time.perf_counter()
    if kind == "params":
        fluid.io.save_params(exe, dirname, prog)
    else:
        fluid.io.save_inference_model(dirname, ["x"], [y], exe, prog)
    print("saved %.4f" % (time.perf_counter() - start), flush=True)


if __name__ == "__main__":
    main()
