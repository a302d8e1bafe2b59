#!/usr/bin/python3
"""understand_sentiment (LSTM): the book's stacked LSTM network (an fc and a dynamic_lstm per
layer, three layers alternating direction, max-pooled over each sentence, a softmax fc over
both pools) on the synthetic reviews of understand_sentiment.py.

    PYTHONPATH=build/python /usr/bin/python3 examples/book/understand_sentiment_lstm.py
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import common  # noqa: E402
import understand_sentiment as data  # noqa: E402
from common import fluid  # noqa: E402

NAME, BATCH, EPOCHS = "understand_sentiment_lstm", 64, 2
TARGET = ("accuracy", 0.85, "max")
EMB, HID, STACKED = 128, 512, 3
batches, evaluate = data.batches, data.evaluate


def stacked_lstm_net(words, input_dim, class_dim, emb_dim, hid_dim, stacked_num):
    emb = fluid.embedding(input=words, size=[input_dim, emb_dim], is_sparse=True)
    fc1 = fluid.layers.fc(input=emb, size=hid_dim)
    lstm1, cell1 = fluid.layers.dynamic_lstm(input=fc1, size=hid_dim)
    inputs = [fc1, lstm1]
    for i in range(2, stacked_num + 1):
        fc = fluid.layers.fc(input=inputs, size=hid_dim)
        lstm, cell = fluid.layers.dynamic_lstm(input=fc, size=hid_dim, is_reverse=(i % 2) == 0)
        inputs = [fc, lstm]
    fc_last = fluid.layers.sequence_pool(input=inputs[0], pool_type="max")
    lstm_last = fluid.layers.sequence_pool(input=inputs[1], pool_type="max")
    return fluid.layers.fc(input=[fc_last, lstm_last], size=class_dim, act="softmax")


def build(seed):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = fluid.data(name="words", shape=[None], dtype="int64", lod_level=1)
        label = fluid.data(name="label", shape=[None, 1], dtype="int64")
        prediction = stacked_lstm_net(words, data.DICT, 2, EMB, HID, STACKED)
        avg_cost = fluid.layers.mean(fluid.layers.cross_entropy(input=prediction, label=label))
        test = main.clone(for_test=True)
        # The book's Adagrad, at 0.02 instead of 0.002 (4000 reviews here, not IMDB's 25000).
        fluid.optimizer.Adagrad(learning_rate=0.02).minimize(avg_cost)
    return common.Model(main, startup, test, ["words", "label"], avg_cost, ["words"],
                        [prediction])


if __name__ == "__main__":
    sys.exit(common.main(sys.modules[__name__]))
