#!/usr/bin/python3
"""recognize_digits: LeNet-5 (two fluid.nets.simple_img_conv_pool blocks and a softmax fc)
trained with Adam (the book's second chapter), on Fashion-MNIST from Debian's
dataset-fashion-mnist package (the book uses MNIST; Fashion-MNIST is the harder drop-in).

    PYTHONPATH=build/python /usr/bin/python3 examples/book/recognize_digits.py
"""
import gzip
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "recognize_digits", 64, 2
TARGET = ("accuracy", 0.88, "max")
DATA_DIR = os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist")
_cache = {}


def _read(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[4:8], "big")
    if int.from_bytes(data[0:4], "big") == 2051:
        return (np.frombuffer(data, np.uint8, offset=16).reshape(n, 1, 28, 28)
                .astype("float32") / 255.0 - 0.5) / 0.5  # the book's [-1, 1] scaling
    return np.frombuffer(data, np.uint8, offset=8).astype("int64").reshape(n, 1)


def _split(split):
    if split not in _cache:
        prefix = "train" if split == "train" else "t10k"
        path = os.path.join(DATA_DIR, prefix + "-%s-idx%d-ubyte.gz")
        if not os.path.exists(path % ("images", 3)):
            raise FileNotFoundError("Fashion-MNIST is not in %s: install Debian's "
                                    "dataset-fashion-mnist (scripts/install-deps.sh)" % DATA_DIR)
        _cache[split] = _read(path % ("images", 3)), _read(path % ("labels", 1))
    return _cache[split]


def batches(split, batch_size, seed):
    x, y = _split(split)
    order = np.random.RandomState(seed).permutation(len(x)) if split == "train" else \
        np.arange(len(x))
    for i in range(0, len(x) - batch_size + 1, batch_size):
        rows = order[i:i + batch_size]
        yield {"img": x[rows], "label": y[rows]}


def convolutional_neural_network(img):
    conv_pool_1 = fluid.nets.simple_img_conv_pool(
        input=img, filter_size=5, num_filters=20, pool_size=2, pool_stride=2, act="relu")
    conv_pool_2 = fluid.nets.simple_img_conv_pool(
        input=conv_pool_1, filter_size=5, num_filters=50, pool_size=2, pool_stride=2,
        act="relu")
    return fluid.layers.fc(input=conv_pool_2, size=10, act="softmax")


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = fluid.data(name="img", shape=[None, 1, 28, 28], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        prediction = convolutional_neural_network(img)
        loss = fluid.layers.cross_entropy(input=prediction, label=label)
        avg_loss = fluid.layers.mean(loss)
        acc = fluid.layers.accuracy(input=prediction, label=label)
        test = main.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.001).minimize(avg_loss)
    return common.Model(main, startup, test, ["img", "label"], avg_loss, ["img"], [prediction],
                        extra={"acc": acc})


def evaluate(exe, model):
    correct = total = 0
    for feed in batches("test", 500, 0):
        (pred,) = exe.run(model.test, feed=feed, fetch_list=model.infer_targets)
        correct += int((np.argmax(pred, 1) == feed["label"].ravel()).sum())
        total += len(pred)
    return correct / total


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
