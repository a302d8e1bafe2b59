#!/usr/bin/python3
"""image_classification: the book's ResNet for CIFAR-10 (conv_bn_layer, shortcut, basicblock,
layer_warp; depth 8 here instead of 32, for the 2-core CI machine) trained with Adam, on
synthetic 3x32x32 images: each of the 10 classes is a coloured square at a class-specific
place, on noise, with random jitter (CIFAR-10 ships in no Debian package).

    PYTHONPATH=build/python /usr/bin/python3 examples/book/image_classification.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "image_classification", 64, 2
TARGET = ("accuracy", 0.9, "max")
DEPTH = 8
_cache = {}


def _split(split):
    if split not in _cache:
        n = 4096 if split == "train" else 1024
        rng = np.random.RandomState(3 if split == "train" else 4)
        labels = rng.randint(0, 10, size=n)
        x = rng.randn(n, 3, 32, 32).astype("float32") * 0.5
        colour = np.random.RandomState(5).rand(10, 3).astype("float32") * 2 - 1
        for i, c in enumerate(labels):
            r0 = 2 + (c % 5) * 6 + rng.randint(-1, 2)
            c0 = 4 + (c // 5) * 14 + rng.randint(-1, 2)
            x[i, :, r0:r0 + 5, c0:c0 + 8] += colour[c][:, None, None] + 1.0
        _cache[split] = x, labels.astype("int64").reshape(n, 1)
    return _cache[split]


def batches(split, batch_size, seed):
    x, y = _split(split)
    order = np.random.RandomState(seed).permutation(len(x)) if split == "train" else \
        np.arange(len(x))
    for i in range(0, len(x) - batch_size + 1, batch_size):
        rows = order[i:i + batch_size]
        yield {"pixel": x[rows], "label": y[rows]}


def conv_bn_layer(input, ch_out, filter_size, stride, padding, act="relu", bias_attr=False):
    tmp = fluid.layers.conv2d(input=input, filter_size=filter_size, num_filters=ch_out,
                              stride=stride, padding=padding, act=None, bias_attr=bias_attr)
    return fluid.layers.batch_norm(input=tmp, act=act)


def shortcut(input, ch_in, ch_out, stride):
    if ch_in != ch_out:
        return conv_bn_layer(input, ch_out, 1, stride, 0, None)
    return input


def basicblock(input, ch_in, ch_out, stride):
    tmp = conv_bn_layer(input, ch_out, 3, stride, 1)
    tmp = conv_bn_layer(tmp, ch_out, 3, 1, 1, act=None, bias_attr=True)
    short = shortcut(input, ch_in, ch_out, stride)
    return fluid.layers.elementwise_add(x=tmp, y=short, act="relu")


def layer_warp(block_func, input, ch_in, ch_out, count, stride):
    tmp = block_func(input, ch_in, ch_out, stride)
    for _ in range(1, count):
        tmp = block_func(tmp, ch_out, ch_out, 1)
    return tmp


def resnet_cifar10(ipt, depth=32):
    assert (depth - 2) % 6 == 0
    n = (depth - 2) // 6
    conv1 = conv_bn_layer(ipt, ch_out=16, filter_size=3, stride=1, padding=1)
    res1 = layer_warp(basicblock, conv1, 16, 16, n, 1)
    res2 = layer_warp(basicblock, res1, 16, 32, n, 2)
    res3 = layer_warp(basicblock, res2, 32, 64, n, 2)
    pool = fluid.layers.pool2d(input=res3, pool_size=8, pool_type="avg", pool_stride=1)
    return fluid.layers.fc(input=pool, size=10, act="softmax")


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        images = fluid.data(name="pixel", shape=[None, 3, 32, 32], dtype="float32")
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        predict = resnet_cifar10(images, DEPTH)
        cost = fluid.layers.cross_entropy(input=predict, label=label)
        avg_cost = fluid.layers.mean(cost)
        test = main.clone(for_test=True)
        fluid.optimizer.Adam(learning_rate=0.001).minimize(avg_cost)
    return common.Model(main, startup, test, ["pixel", "label"], avg_cost, ["pixel"], [predict],
                        has_batch_norm=True)


def evaluate(exe, model):
    correct = total = 0
    for feed in batches("test", 256, 0):
        (pred,) = exe.run(model.test, feed=feed, fetch_list=model.infer_targets)
        correct += int((np.argmax(pred, 1) == feed["label"].ravel()).sum())
        total += len(pred)
    return correct / total


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
