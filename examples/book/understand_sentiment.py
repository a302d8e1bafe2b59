#!/usr/bin/python3
"""understand_sentiment: the book's convolution network for sentiment (an embedding of each
word of a variable-length sentence, fed as a LoD tensor; two fluid.nets.sequence_conv_pool
branches of window 3 and 4 with tanh and sqrt pooling; a softmax fc), on synthetic reviews:
sentences of 5-40 words from a 2000-word vocabulary where 100 words lean positive and 100
negative, labelled by which kind is in the majority (IMDB ships in no Debian package).

    PYTHONPATH=build/python /usr/bin/python3 examples/book/understand_sentiment.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "understand_sentiment", 64, 3
TARGET = ("accuracy", 0.85, "max")
DICT, EMB, HID = 2000, 128, 128
_cache = {}


def _reviews(split):
    if split not in _cache:
        rng = np.random.RandomState(21 if split == "train" else 22)
        out = []
        while len(out) < (4000 if split == "train" else 1000):
            n = rng.randint(5, 41)
            words = rng.randint(200, DICT, size=n)
            k = rng.randint(1, 5)
            pos = rng.binomial(k, 0.5)
            neg = k - pos
            if pos == neg:
                continue
            words[rng.choice(n, pos + neg, replace=False)] = np.concatenate(
                [rng.randint(0, 100, size=pos), rng.randint(100, 200, size=neg)])
            out.append((words.tolist(), [int(pos > neg)]))
        _cache[split] = out
    return _cache[split]


def batches(split, batch_size, seed):
    data = _reviews(split)
    order = np.random.RandomState(seed).permutation(len(data)) if split == "train" else \
        np.arange(len(data))
    for i in range(0, len(data) - batch_size + 1, batch_size):
        rows = [data[j] for j in order[i:i + batch_size]]
        flat = np.array([x for w, _ in rows for x in w], "int64")
        words = fluid.create_lod_tensor(flat, [[len(w) for w, _ in rows]], fluid.CPUPlace())
        yield {"words": words, "label": np.array([l for _, l in rows], "int64")}


def convolution_net(data, input_dim, class_dim, emb_dim, hid_dim):
    emb = fluid.embedding(input=data, size=[input_dim, emb_dim], is_sparse=True)
    conv_3 = fluid.nets.sequence_conv_pool(input=emb, num_filters=hid_dim, filter_size=3,
                                           act="tanh", pool_type="sqrt")
    conv_4 = fluid.nets.sequence_conv_pool(input=emb, num_filters=hid_dim, filter_size=4,
                                           act="tanh", pool_type="sqrt")
    return fluid.layers.fc(input=[conv_3, conv_4], size=class_dim, act="softmax")


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        data = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        prediction = convolution_net(data, DICT, 2, EMB, HID)
        cost = fluid.layers.cross_entropy(input=prediction, label=label)
        avg_cost = fluid.layers.mean(cost)
        test = main.clone(for_test=True)
        # The book's Adagrad, at 0.05 instead of 0.002: 4000 reviews read 3 times here.
        fluid.optimizer.Adagrad(learning_rate=0.05).minimize(avg_cost)
    return common.Model(main, startup, test, ["words", "label"], avg_cost, ["words"],
                        [prediction])


def evaluate(exe, model):
    correct = total = 0
    for feed in batches("test", 250, 0):
        (pred,) = exe.run(model.test, feed=feed, fetch_list=model.infer_targets)
        correct += int((np.argmax(pred, 1) == feed["label"].ravel()).sum())
        total += len(pred)
    return correct / total


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
