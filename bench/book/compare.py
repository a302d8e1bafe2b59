"""Training throughput of two book models, Loom beside PyTorch (Debian's python3-torch, same
process, same data, same batch): the word2vec N-gram model (words/s: predicted words per
second) and an LSTM sentiment classifier over variable-length sentences (sequences/s).

    PYTHONPATH=build/python /usr/bin/python3 bench/book/compare.py [--threads N]

The LSTM is one layer, as both frameworks build it: Loom's fc (4 * D) + dynamic_lstm without
peepholes is the same arithmetic as torch.nn.LSTM (input and recurrent projections, four
gates); PyTorch runs packed sequences. Medians of 3 rounds of STEPS steps after a warm-up.
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples", "book"))
import loom as fluid  # noqa: E402

STEPS, ROUNDS = 30, 3
DICT_W2V, EMB_W2V, HID_W2V, BATCH_W2V = 500, 32, 256, 100
DICT_S, EMB_S, D_S, BATCH_S = 2000, 128, 128, 64


def w2v_batches(n):
    rng = np.random.RandomState(0)
    return [rng.randint(0, DICT_W2V, size=(BATCH_W2V, 5)).astype("int64") for _ in range(n)]


def sentence_batches(n):
    rng = np.random.RandomState(1)
    out = []
    for _ in range(n):
        lens = rng.randint(5, 41, size=BATCH_S)
        words = [rng.randint(0, DICT_S, size=l) for l in lens]
        out.append((words, rng.randint(0, 2, size=BATCH_S).astype("int64")))
    return out


def timed(step, batches):
    for b in batches[:3]:
        step(b)
    rates = []
    for _ in range(ROUNDS):
        t0 = time.perf_counter()
        for b in batches[:STEPS]:
            step(b)
        rates.append(STEPS / (time.perf_counter() - t0))
    return statistics.median(rates)


def loom_w2v():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = [fluid.data(n, [None, 1], dtype="int64") for n in "abcde"]
        embs = [fluid.embedding(w, [DICT_W2V, EMB_W2V], is_sparse=True, param_attr="shared_w")
                for w in words[:4]]
        h = fluid.layers.fc(fluid.layers.concat(embs, axis=1), HID_W2V, act="sigmoid")
        p = fluid.layers.fc(h, DICT_W2V, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(p, words[4]))
        fluid.optimizer.Adagrad(0.1).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)

    def step(b):
        exe.run(main, feed={n: b[:, i:i + 1] for i, n in enumerate("abcde")}, fetch_list=[loss])
    return timed(step, w2v_batches(STEPS + 3)) * BATCH_W2V


def torch_w2v():
    import torch
    emb = torch.nn.Embedding(DICT_W2V, EMB_W2V)
    net = torch.nn.Sequential(torch.nn.Linear(4 * EMB_W2V, HID_W2V), torch.nn.Sigmoid(),
                              torch.nn.Linear(HID_W2V, DICT_W2V))
    opt = torch.optim.Adagrad(list(emb.parameters()) + list(net.parameters()), lr=0.1)

    def step(b):
        t = torch.from_numpy(b)
        logits = net(emb(t[:, :4]).reshape(len(b), -1))
        loss = torch.nn.functional.cross_entropy(logits, t[:, 4])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return timed(step, w2v_batches(STEPS + 3)) * BATCH_W2V


def loom_lstm():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        words = fluid.data("words", [None], dtype="int64", lod_level=1)
        label = fluid.data("label", [None, 1], dtype="int64")
        emb = fluid.embedding(words, [DICT_S, EMB_S])
        proj = fluid.layers.fc(emb, 4 * D_S)
        hidden, _ = fluid.layers.dynamic_lstm(proj, 4 * D_S, use_peepholes=False)
        pooled = fluid.layers.sequence_pool(hidden, "max")
        p = fluid.layers.fc(pooled, 2, act="softmax")
        loss = fluid.layers.mean(fluid.layers.cross_entropy(p, label))
        fluid.optimizer.Adam(0.001).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)

    def step(b):
        words_b, labels = b
        t = fluid.create_lod_tensor(np.concatenate(words_b), [[len(w) for w in words_b]],
                                    fluid.CPUPlace())
        exe.run(main, feed={"words": t, "label": labels.reshape(-1, 1)}, fetch_list=[loss])
    return timed(step, sentence_batches(STEPS + 3)) * BATCH_S


def torch_lstm():
    import torch
    from torch.nn.utils.rnn import pack_sequence, pad_packed_sequence

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(DICT_S, EMB_S)
            self.lstm = torch.nn.LSTM(EMB_S, D_S)
            self.out = torch.nn.Linear(D_S, 2)

        def forward(self, seqs):
            packed = pack_sequence([self.emb(s) for s in seqs], enforce_sorted=False)
            h, lens = pad_packed_sequence(self.lstm(packed)[0], padding_value=-1e9)
            return self.out(h.max(0).values)
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=0.001)

    def step(b):
        words_b, labels = b
        logits = net([torch.from_numpy(w) for w in words_b])
        loss = torch.nn.functional.cross_entropy(logits, torch.from_numpy(labels))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return timed(step, sentence_batches(STEPS + 3)) * BATCH_S


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: default)")
    a = ap.parse_args()
    rows = [("word2vec N-gram, words/s", loom_w2v, torch_w2v),
            ("LSTM sentiment, sequences/s", loom_lstm, torch_lstm)]
    try:
        import torch
        if a.threads:
            torch.set_num_threads(a.threads)
        peer = "torch " + torch.__version__
    except ImportError:
        peer = None
    print("%-32s %12s %12s %8s" % ("model", "loom", peer or "(no torch)", "ratio"))
    for name, ours, theirs in rows:
        x = ours()
        y = theirs() if peer else float("nan")
        print("%-32s %12.0f %12.0f %8.2f" % (name, x, y, x / y if peer else float("nan")))


if __name__ == "__main__":
    main()
