"""fluid.layers.rnn / birnn with GRUCell and LSTMCell (unrolled over the static time dim):
outputs equal a NumPy recurrence with the cells' parameters, sequence_length freezes states
past each length, gradients train the cells."""
import numpy as np
import pytest

import loom as fluid

L = fluid.layers


def sig(x):
    return 1 / (1 + np.exp(-x))


def run(build, feed):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        outs, params = build()
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        got = exe.run(main, feed=feed, fetch_list=outs)
        vals = {p: np.array(scope.find_var(p).get_tensor()) for p in params}
    return got, vals


def test_gru_cell_matches_numpy_with_lengths():
    rng = np.random.RandomState(0)
    x = rng.randn(3, 4, 2)
    lens = np.array([4, 2, 1], "int64")

    def build():
        inp = fluid.data("x", [None, 4, 2], dtype="float64")
        ln = fluid.data("len", [None], dtype="int64")
        cell = L.GRUCell(3, dtype="float64", name="g")
        out, h = L.rnn(cell, inp, sequence_length=ln)
        return [out, h], ["g.gate_w", "g.gate_b", "g.cand_w", "g.cand_b"]
    (out, h), p = run(build, {"x": x, "len": lens})
    hs = np.zeros((3, 3))
    want = np.zeros((3, 4, 3))
    for t in range(4):
        xh = np.concatenate([x[:, t], hs], 1)
        u, r = np.split(sig(xh @ p["g.gate_w"] + p["g.gate_b"]), 2, 1)
        c = np.tanh(np.concatenate([x[:, t], r * hs], 1) @ p["g.cand_w"] + p["g.cand_b"])
        new = u * (c - hs) + hs
        keep = (t < lens)[:, None]
        hs = np.where(keep, new, hs)
        want[:, t] = np.where(keep, new, 0)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(h, hs, rtol=1e-10)


def test_lstm_cell_birnn_matches_numpy():
    rng = np.random.RandomState(1)
    x = rng.randn(2, 3, 2)

    def build():
        inp = fluid.data("x", [None, 3, 2], dtype="float64")
        fw = L.LSTMCell(2, dtype="float64", name="f", forget_bias=0.5)
        bw = L.LSTMCell(2, dtype="float64", name="b")
        out, _ = L.birnn(fw, bw, inp)
        return [out], ["f.w", "f.b", "b.w", "b.b"]
    (out,), p = run(build, {"x": x})

    def lstm(prefix, order, fb):
        h, c = np.zeros((2, 2)), np.zeros((2, 2))
        res = np.zeros((2, 3, 2))
        for t in order:
            g = np.concatenate([x[:, t], h], 1) @ p[prefix + ".w"] + p[prefix + ".b"]
            i, j, f, o = np.split(g, 4, 1)
            c = c * sig(f + fb) + sig(i) * np.tanh(j)
            h = np.tanh(c) * sig(o)
            res[:, t] = h
        return res
    want = np.concatenate([lstm("f", range(3), 0.5), lstm("b", range(2, -1, -1), 1.0)], -1)
    np.testing.assert_allclose(out, want, rtol=1e-10, atol=1e-12)


def test_a_gru_rnn_learns_to_count():
    """Label = whether the sequence holds more ones than zeros: needs the recurrence."""
    rng = np.random.RandomState(2)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        inp = fluid.data("x", [None, 7, 1])
        label = fluid.data("y", [None, 1], dtype="int64")
        _, h = L.rnn(L.GRUCell(16), inp)
        loss = L.mean(L.softmax_with_cross_entropy(L.fc(h, 2), label))
        fluid.optimizer.Adam(0.02).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = []
        for _ in range(150):
            xb = rng.randint(0, 2, size=(32, 7, 1)).astype("float32")
            yb = (xb.sum((1, 2)) > 3.5).astype("int64").reshape(-1, 1)
            losses.append(float(exe.run(main, feed={"x": xb, "y": yb}, fetch_list=[loss])[0][0]))
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:10]), (losses[:5], losses[-5:])


def test_rnn_over_an_unknown_time_dim_is_a_while_loop():
    # checked against the unrolled rnn in test_lod_array_rnn.py
    main = fluid.Program()
    with fluid.program_guard(main):
        inp = fluid.data("x", [None, None, 2])
        out, _ = L.rnn(L.GRUCell(3), inp)
    assert [op.type for op in main.global_block().ops].count("while") == 1
    assert list(out.shape) == [-1, -1, 3]
