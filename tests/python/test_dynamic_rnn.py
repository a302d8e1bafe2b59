"""DynamicRNN against layers.rnn over the same sequences padded (itself checked against NumPy):
outputs, losses and parameter gradients equal in float64; memories from init and from shape,
several outputs, static inputs, training, and the errors of a misused block."""
import numpy as np
import pytest

import loom as fluid
from loom import layers as L

D, H = 3, 4
LENS = [2, 5, 1, 3]


def params(seed):
    rng = np.random.RandomState(seed)
    return {"wx": rng.randn(D, H) * 0.5, "wh": rng.randn(H, H) * 0.5, "b": rng.randn(H) * 0.1,
            "r": rng.randn(sum(LENS), H)}


def attr(name, value):
    return fluid.ParamAttr(name=name,
                           initializer=fluid.initializer.NumpyArrayInitializer(value))


def f32(p):
    return {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}


def step(x, h, p):
    return L.fc([x, h], H, act="tanh", param_attr=[attr("wx", p["wx"]), attr("wh", p["wh"])],
                bias_attr=attr("b", p["b"]))


def run(build, feed, fetch_names):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss, out = build()
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        return exe.run(main, feed=feed, fetch_list=[loss, out] + fetch_names)


def sequences(seed):
    rng = np.random.RandomState(seed)
    rows = rng.randn(sum(LENS), D)
    padded = np.zeros((len(LENS), max(LENS), D))
    at = 0
    for i, n in enumerate(LENS):
        padded[i, :n] = rows[at:at + n]
        at += n
    return rows, padded


def unpad(padded):
    return np.concatenate([padded[i, :n] for i, n in enumerate(LENS)])


@pytest.mark.parametrize("with_init", [False, True])
def test_dynamic_rnn_equals_rnn_on_padded_sequences(with_init):
    p = f32(params(0))
    rows, padded = sequences(1)
    boot = np.random.RandomState(2).randn(len(LENS), H)
    grads = ["wx@GRAD", "wh@GRAD", "b@GRAD"]

    def dynamic():
        x = fluid.data("x", [None, D], dtype="float64", lod_level=1)
        r = fluid.data("r", [None, H], dtype="float64", lod_level=1)
        h0 = fluid.data("h0", [None, H], dtype="float64")
        drnn = L.DynamicRNN()
        with drnn.block():
            xt = drnn.step_input(x)
            prev = drnn.memory(init=h0, need_reorder=True) if with_init else \
                drnn.memory(shape=[H], dtype="float64")
            h = step(xt, prev, p)
            drnn.update_memory(prev, h)
            drnn.output(h)
        out = drnn()
        return L.reduce_sum(L.elementwise_mul(out, r)), out

    class Cell(L.RNNCell):
        def call(self, x, h):
            new = step(x, h, p)
            return new, new

    def padded_rnn():
        x = fluid.data("xp", [None, max(LENS), D], dtype="float64")
        r = fluid.data("rp", [None, max(LENS), H], dtype="float64")
        n = fluid.data("n", [None], dtype="int64")
        h0 = fluid.data("h0", [None, H], dtype="float64")
        init = h0 if with_init else L.fill_constant_batch_size_like(x, [-1, H], "float64", 0.0)
        out, _ = L.rnn(Cell(), x, initial_states=init, sequence_length=n)
        return L.reduce_sum(L.elementwise_mul(out, r)), out

    lod = fluid.create_lod_tensor(rows, [LENS], fluid.CPUPlace())
    rv = fluid.create_lod_tensor(p["r"], [LENS], fluid.CPUPlace())
    got = run(dynamic, {"x": lod, "r": rv, "h0": boot}, grads)
    rp = np.zeros((len(LENS), max(LENS), H))
    at = 0
    for i, k in enumerate(LENS):
        rp[i, :k] = p["r"][at:at + k]
        at += k
    want = run(padded_rnn, {"xp": padded, "rp": rp, "n": np.array(LENS, "int64"), "h0": boot},
               grads)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-12, atol=1e-13)
    np.testing.assert_allclose(got[1], unpad(want[1]), rtol=1e-12, atol=1e-14)
    for g, w, name in zip(got[2:], want[2:], grads):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=name)


def test_dynamic_rnn_static_input_two_outputs_and_lod():
    rows, _ = sequences(3)
    ctx = np.random.RandomState(4).randn(len(LENS), H)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, D], dtype="float32", lod_level=1)
        c = fluid.data("c", [None, H], dtype="float32")
        drnn = L.DynamicRNN()
        with drnn.block():
            xt = drnn.step_input(x)
            ct = drnn.static_input(c)
            acc = drnn.memory(shape=[D], value=1.0)
            total = L.elementwise_add(acc, xt)
            drnn.update_memory(acc, total)
            drnn.output(total, L.scale(ct, 2.0))
        running, doubled = drnn()
    got_sum, got_c = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": fluid.create_lod_tensor(rows.astype("float32"), [LENS],
                                                 fluid.CPUPlace()),
                    "c": ctx.astype("float32")},
        fetch_list=[running, doubled], return_numpy=False)
    assert got_sum.recursive_sequence_lengths() == [LENS]
    at, want_sum, want_c = 0, [], []
    for i, n in enumerate(LENS):
        want_sum.append(1.0 + np.cumsum(rows[at:at + n], axis=0))
        want_c.append(np.repeat(2 * ctx[i:i + 1], n, axis=0))
        at += n
    np.testing.assert_allclose(np.array(got_sum), np.concatenate(want_sum), rtol=1e-5)
    np.testing.assert_allclose(np.array(got_c), np.concatenate(want_c), rtol=1e-6)


def test_dynamic_rnn_trains():
    # A DynamicRNN classifier of sequences by the sign of their sum: the loss falls.
    rng = np.random.RandomState(5)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 1], dtype="float32", lod_level=1)
        y = fluid.data("y", [None, 1], dtype="int64")
        drnn = L.DynamicRNN()
        with drnn.block():
            xt = drnn.step_input(x)
            prev = drnn.memory(shape=[8])
            h = L.fc([xt, prev], 8, act="tanh")
            drnn.update_memory(prev, h)
            drnn.output(h)
        last = L.sequence_last_step(drnn())
        loss = L.mean(L.softmax_with_cross_entropy(L.fc(last, 2), y))
        fluid.optimizer.Adam(0.02).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    losses = []
    for _ in range(60):
        lens = rng.randint(1, 6, size=16)
        vals = rng.randn(lens.sum(), 1).astype("float32")
        sums = np.add.reduceat(vals[:, 0], np.concatenate([[0], np.cumsum(lens)[:-1]]))
        feed = {"x": fluid.create_lod_tensor(vals, [list(lens)], fluid.CPUPlace()),
                "y": (sums > 0).astype("int64").reshape(-1, 1)}
        losses.append(float(exe.run(main, feed=feed, fetch_list=[loss])[0]))
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:10]), losses


def test_misuse_is_named():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [None, D], dtype="float32", lod_level=1)
        drnn = L.DynamicRNN()
        with pytest.raises(ValueError, match="inside `with drnn.block"):
            drnn.step_input(x)
        with pytest.raises(ValueError, match="after its `with drnn.block"):
            drnn()
        with pytest.raises(ValueError, match="never updated"):
            with drnn.block():
                xt = drnn.step_input(x)
                drnn.memory(shape=[H])
                drnn.output(xt)
        d2 = L.DynamicRNN()
        with pytest.raises(ValueError, match="after a step_input"):
            with d2.block():
                d2.memory(shape=[H])
        d3 = L.DynamicRNN()
        with pytest.raises(ValueError, match="no output"):
            with d3.block():
                d3.step_input(x)
