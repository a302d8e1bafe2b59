#!/usr/bin/python3
"""word2vec: the N-gram neural language model (four context words, one shared embedding table
with is_sparse=True, concat, a sigmoid hidden layer, softmax over the dictionary) trained with
Adagrad and L2 decay 8e-4, as in the book's word2vec chapter (learning rate 0.1 instead of
3e-3: the corpus here is 60k words read 10 times, not PTB's 900k read 100 times), on a
synthetic corpus: a random Markov language over 500 words whose next word has four likely
successors of the previous word (probabilities .55 .25 .1 .1: a perplexity of 3.1 for a model
that learns it, about 500 for one that does not).

    PYTHONPATH=build/python /usr/bin/python3 examples/book/word2vec.py
"""
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "word2vec", 100, 10
TARGET = ("perplexity", 10.0, "min")
DICT, EMBED, HIDDEN, N = 500, 32, 256, 5
_cache = {}


def _corpus(split):
    """(context words [n, 4], next word [n, 1]) from a generated text."""
    if split not in _cache:
        lang = np.random.RandomState(11)
        # Each word picks its successor from 4 with probabilities .55 .25 .1 .1.
        succ = lang.randint(0, DICT, size=(DICT, 4))
        probs = np.array([0.55, 0.25, 0.1, 0.1])
        rng = np.random.RandomState(1 if split == "train" else 2)
        words = [0, 1]
        for _ in range(60000 if split == "train" else 6000):
            words.append(succ[words[-1], rng.choice(4, p=probs)])
        w = np.array(words, "int64")
        grams = np.stack([w[i:len(w) - N + 1 + i] for i in range(N)], 1)
        _cache[split] = grams[:, :4], grams[:, 4:]
    return _cache[split]


def batches(split, batch_size, seed):
    ctx, nxt = _corpus(split)
    order = np.random.RandomState(seed).permutation(len(ctx)) if split == "train" else \
        np.arange(len(ctx))
    for i in range(0, len(ctx) - batch_size + 1, batch_size):
        rows = order[i:i + batch_size]
        feed = {"firstw": ctx[rows, 0:1], "secondw": ctx[rows, 1:2], "thirdw": ctx[rows, 2:3],
                "forthw": ctx[rows, 3:4], "nextw": nxt[rows]}
        yield feed


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = [fluid.data(name=n, shape=[None, 1], dtype="int64")
                 for n in ("firstw", "secondw", "thirdw", "forthw", "nextw")]
        embeds = [fluid.embedding(input=w, size=[DICT, EMBED], dtype="float32", is_sparse=True,
                                  param_attr="shared_w") for w in words[:4]]
        concat_embed = fluid.layers.concat(input=embeds, axis=1)
        hidden1 = fluid.layers.fc(input=concat_embed, size=HIDDEN, act="sigmoid")
        predict_word = fluid.layers.fc(input=hidden1, size=DICT, act="softmax")
        cost = fluid.layers.cross_entropy(input=predict_word, label=words[4])
        avg_cost = fluid.layers.mean(cost)
        test = main.clone(for_test=True)
        fluid.optimizer.AdagradOptimizer(
            learning_rate=0.1,
            regularization=fluid.regularizer.L2DecayRegularizer(8e-4)).minimize(avg_cost)
    names = ["firstw", "secondw", "thirdw", "forthw"]
    return common.Model(main, startup, test, names + ["nextw"], avg_cost, names, [predict_word])


def evaluate(exe, model):
    nll = count = 0
    for feed in batches("test", 1000, 0):
        (pred,) = exe.run(model.test, feed=feed, fetch_list=model.infer_targets)
        p = pred[np.arange(len(pred)), feed["nextw"].ravel()]
        nll += float(-np.log(np.maximum(p, 1e-12)).sum())
        count += len(p)
    return math.exp(nll / count)


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
