#!/usr/bin/python3
"""label_semantic_roles: the book's semantic role labelling network (word, predicate and mark
embeddings into an fc, stacked dynamic_lstm layers alternating direction with fcs mixing each
layer's input and output, an fc to tag scores, a linear_chain_crf cost, crf_decoding and
chunk_eval), depth 2 instead of 8 and width 128 instead of 512 for the 2-core CI machine, on
synthetic sentences (CoNLL-2005 ships in no Debian package): each has one predicate, an A0
argument of 1-3 words before it and an A1 argument after it, tagged IOB, whose words come
mostly (80%) from the argument's own part of the vocabulary.

    PYTHONPATH=build/python /usr/bin/python3 examples/book/label_semantic_roles.py
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "label_semantic_roles", 32, 4
TARGET = ("chunk F1", 0.8, "max")
WORDS, PREDICATES, TYPES = 1000, 100, 3  # chunk types A0, A1, V
TAGS = 2 * TYPES + 1  # IOB: B-k = 2k, I-k = 2k + 1, O = 2 * TYPES
EMB, HIDDEN, DEPTH = 32, 128, 2
_cache = {}


def _sentences(split):
    if split not in _cache:
        rng = np.random.RandomState(41 if split == "train" else 42)
        out = []
        for _ in range(2000 if split == "train" else 400):
            n = rng.randint(10, 21)
            p = rng.randint(4, n - 4)
            words = rng.randint(500, WORDS, size=n)
            tags = np.full(n, 2 * TYPES)
            a0 = rng.randint(1, 4)
            a1 = rng.randint(1, 4)
            # An argument's words come from its part of the vocabulary 80% of the time.
            words[p - a0:p] = np.where(rng.rand(a0) < 0.8, rng.randint(100, 300, size=a0),
                                       rng.randint(500, WORDS, size=a0))
            tags[p - a0:p] = [0] + [1] * (a0 - 1)
            words[p + 1:p + 1 + a1] = np.where(rng.rand(a1) < 0.8,
                                               rng.randint(300, 500, size=a1),
                                               rng.randint(500, WORDS, size=a1))
            tags[p + 1:p + 1 + a1] = [2] + [3] * (a1 - 1)
            pred = rng.randint(0, PREDICATES)
            words[p] = pred
            tags[p] = 4  # B-V
            mark = np.zeros(n, "int64")
            mark[max(p - 2, 0):p + 3] = 1
            out.append((words.astype("int64"), np.full(n, pred, "int64"), mark,
                        tags.astype("int64")))
        _cache[split] = out
    return _cache[split]


def batches(split, batch_size, seed):
    data = _sentences(split)
    order = np.random.RandomState(seed).permutation(len(data)) if split == "train" else \
        np.arange(len(data))
    for i in range(0, len(data) - batch_size + 1, batch_size):
        rows = [data[j] for j in order[i:i + batch_size]]
        lens = [[len(r[0]) for r in rows]]

        def lod(k):
            return fluid.create_lod_tensor(np.concatenate([r[k] for r in rows]).reshape(-1, 1),
                                           lens, fluid.CPUPlace())
        yield {"word": lod(0), "predicate": lod(1), "mark": lod(2), "target": lod(3)}


def db_lstm(word, predicate, mark):
    word_emb = fluid.embedding(input=word, size=[WORDS, EMB], param_attr="emb")
    pred_emb = fluid.embedding(input=predicate, size=[PREDICATES, EMB], param_attr="vemb")
    mark_emb = fluid.embedding(input=mark, size=[2, 8])
    emb_layers = [fluid.layers.reshape(e, [-1, e.shape[-1]])
                  for e in (word_emb, pred_emb, mark_emb)]
    hidden_0 = fluid.layers.fc(input=emb_layers, size=HIDDEN, act="tanh")
    lstm_0, _ = fluid.layers.dynamic_lstm(input=hidden_0, size=HIDDEN,
                                          candidate_activation="relu",
                                          gate_activation="sigmoid", cell_activation="sigmoid")
    input_tmp = [hidden_0, lstm_0]
    for i in range(1, DEPTH):
        mix_hidden = fluid.layers.fc(input=input_tmp, size=HIDDEN, act="tanh")
        lstm, _ = fluid.layers.dynamic_lstm(input=mix_hidden, size=HIDDEN,
                                            candidate_activation="relu",
                                            gate_activation="sigmoid",
                                            cell_activation="sigmoid", is_reverse=(i % 2) == 1)
        input_tmp = [mix_hidden, lstm]
    return fluid.layers.fc(input=input_tmp, size=TAGS, act=None)


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        word = fluid.data(name="word", shape=[None, 1], dtype="int64", lod_level=1)
        predicate = fluid.data(name="predicate", shape=[None, 1], dtype="int64", lod_level=1)
        mark = fluid.data(name="mark", shape=[None, 1], dtype="int64", lod_level=1)
        target = fluid.data(name="target", shape=[None, 1], dtype="int64", lod_level=1)
        feature_out = db_lstm(word, predicate, mark)
        crf_cost = fluid.layers.linear_chain_crf(input=feature_out, label=target,
                                                 param_attr=fluid.ParamAttr(name="crfw"))
        avg_cost = fluid.layers.mean(crf_cost)
        crf_decode = fluid.layers.crf_decoding(input=feature_out, param_attr="crfw")
        chunk = fluid.layers.chunk_eval(input=crf_decode, label=target, chunk_scheme="IOB",
                                        num_chunk_types=TYPES)
        test = main.clone(for_test=True)
        # Adam 0.003 instead of the book's SGD with decay: 2000 sentences read 4 times here.
        fluid.optimizer.Adam(learning_rate=0.003).minimize(avg_cost)
    return common.Model(main, startup, test, ["word", "predicate", "mark", "target"], avg_cost,
                        ["word", "predicate", "mark"], [crf_decode], extra={"chunk": chunk})


def evaluate(exe, model):
    n_infer = n_label = n_correct = 0
    for feed in batches("test", 100, 0):
        _, _, _, i, l, c = exe.run(model.test, feed=feed, fetch_list=list(model.extra["chunk"]))
        n_infer, n_label, n_correct = n_infer + int(i[0]), n_label + int(l[0]), \
            n_correct + int(c[0])
    p = n_correct / n_infer if n_infer else 0.0
    r = n_correct / n_label if n_label else 0.0
    return 2 * p * r / (p + r) if n_correct else 0.0


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
