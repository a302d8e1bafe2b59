#!/usr/bin/python3
"""fit_a_line: linear regression of house prices with one fc layer and SGD (the book's first
chapter), on synthetic data shaped like UCI housing: 13 standardized features, prices that are
a linear function of them plus noise of variance 4 (so the best test MSE is about 4).

    PYTHONPATH=build/python /usr/bin/python3 examples/book/fit_a_line.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "fit_a_line", 20, 100
TARGET = ("mse", 5.0, "min")
_W = np.random.RandomState(42).randn(13, 1) * 3


def _split(split):
    rng = np.random.RandomState(7)
    x = rng.randn(506, 13)
    y = 22.5 + x @ _W + rng.randn(506, 1) * 2.0
    cut = 404  # the book's 80% / 20% split
    sl = slice(0, cut) if split == "train" else slice(cut, None)
    return x[sl].astype("float32"), y[sl].astype("float32")


def batches(split, batch_size, seed):
    x, y = _split(split)
    order = np.random.RandomState(seed).permutation(len(x)) if split == "train" else \
        np.arange(len(x))
    for i in range(0, len(x) - batch_size + 1, batch_size):
        rows = order[i:i + batch_size]
        yield {"x": x[rows], "y": y[rows]}


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data(name="x", shape=[None, 13], dtype="float32")
        y = fluid.data(name="y", shape=[None, 1], dtype="float32")
        y_predict = fluid.layers.fc(input=x, size=1, act=None)
        cost = fluid.layers.square_error_cost(input=y_predict, label=y)
        avg_loss = fluid.layers.mean(cost)
        test = main.clone(for_test=True)
        fluid.optimizer.SGD(learning_rate=0.001).minimize(avg_loss)
    return common.Model(main, startup, test, ["x", "y"], avg_loss, ["x"], [y_predict])


def evaluate(exe, model):
    x, y = _split("test")
    (pred,) = exe.run(model.test, feed={"x": x, "y": y}, fetch_list=model.infer_targets)
    return float(np.mean((pred - y) ** 2))


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
