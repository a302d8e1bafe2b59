"""layers.rnn over a time dimension known only at run time (a while loop) against the unrolled
rnn, in float64: outputs, final states and parameter gradients, with and without
sequence_length, reversed and time-major; a seq2seq model on [-1, -1, H] inputs trains."""
import numpy as np
import pytest

import loom as fluid
from loom import layers as L

B, T, D, H = 3, 5, 4, 3
LENS = [5, 2, 4]


def attr(value):
    return fluid.ParamAttr(initializer=fluid.initializer.NumpyArrayInitializer(value))


def weights(seed):
    rng = np.random.RandomState(seed)
    return {"w": rng.randn(D + H, 4 * H) * 0.4, "b": rng.randn(4 * H) * 0.1,
            "r": rng.randn(B, T, H), "rh": rng.randn(B, H), "rc": rng.randn(B, H)}


def run_rnn(time_dim, p, x, with_len, is_reverse, time_major):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        shape = [time_dim, None, D] if time_major else [None, time_dim, D]
        xv = fluid.data("x", shape, dtype="float64")
        shape = shape[:2] + [H]
        n = fluid.data("n", [B], dtype="int64") if with_len else None
        cell = L.LSTMCell(H, param_attr=attr(p["w"]), bias_attr=attr(p["b"]), dtype="float64",
                          name="lstm")
        out, (h, c) = L.rnn(cell, xv, sequence_length=n, time_major=time_major,
                            is_reverse=is_reverse)
        r = fluid.data("r", shape, dtype="float64")
        rh = fluid.data("rh", [B, H], dtype="float64")
        rc = fluid.data("rc", [B, H], dtype="float64")
        loss = L.elementwise_add(
            L.reduce_sum(L.elementwise_mul(out, r)),
            L.elementwise_add(L.reduce_sum(L.elementwise_mul(h, rh)),
                              L.reduce_sum(L.elementwise_mul(c, rc))))
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": x.transpose(1, 0, 2) if time_major else x,
            "r": p["r"].transpose(1, 0, 2) if time_major else p["r"], "rh": p["rh"],
            "rc": p["rc"]}
    if with_len:
        feed["n"] = np.array(LENS, "int64")
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        return exe.run(main, feed=feed,
                       fetch_list=[loss, out, h, c, "lstm.w@GRAD", "lstm.b@GRAD"])


@pytest.mark.parametrize("with_len", [False, True])
@pytest.mark.parametrize("is_reverse", [False, True])
@pytest.mark.parametrize("time_major", [False, True])
def test_while_rnn_equals_unrolled(with_len, is_reverse, time_major):
    p = weights(1)
    x = np.random.RandomState(2).randn(B, T, D)
    want = run_rnn(T, p, x, with_len, is_reverse, time_major)
    got = run_rnn(None, p, x, with_len, is_reverse, time_major)
    names = ["loss", "outputs", "final h", "final c", "w@GRAD", "b@GRAD"]
    for g, w, name in zip(got, want, names):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12, err_msg=name)
    if with_len:
        out = got[1].transpose(1, 0, 2) if time_major else got[1]
        for i, k in enumerate(LENS):
            assert not out[i, k:].any()  # zero past each length


def test_while_rnn_one_step_and_errors():
    p = weights(3)
    x = np.random.RandomState(4).randn(B, 1, D)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xv = fluid.data("x", [None, None, D], dtype="float64")
        out, h = L.rnn(L.GRUCell(H, dtype="float64"), xv)
        with pytest.raises(ValueError, match="rnn: inputs must be"):
            L.rnn(L.GRUCell(H, dtype="float64"), fluid.data("v", [None], dtype="float64"))
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    o, hv = exe.run(main, feed={"x": x}, fetch_list=[out, h])
    assert o.shape == (B, 1, H)
    np.testing.assert_allclose(o[:, 0], hv, rtol=1e-14)
    del p


def test_seq2seq_with_unknown_time_trains():
    # copy task: the encoder reads the ids, the decoder (from the encoder's final state)
    # reads them shifted right and predicts them; both rnns run over [-1, -1, H].
    V, E, HID = 6, 8, 16
    rng = np.random.RandomState(5)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        src = fluid.data("src", [None, None], dtype="int64")
        trg_in = fluid.data("trg_in", [None, None], dtype="int64")
        label = fluid.data("label", [None, None], dtype="int64")
        n = fluid.data("n", [None], dtype="int64")
        emb_s = L.embedding(src, [V, E])
        emb_t = L.embedding(trg_in, [V + 1, E])
        assert list(emb_s.shape) == [-1, -1, E]
        _, enc = L.rnn(L.GRUCell(HID, name="enc"), emb_s, sequence_length=n)
        dec, _ = L.rnn(L.GRUCell(HID, name="dec"), emb_t, initial_states=enc,
                       sequence_length=n)
        logits = L.fc(dec, V, num_flatten_dims=2)
        ce = L.softmax_with_cross_entropy(L.reshape(logits, [-1, V]), L.reshape(label, [-1, 1]))
        # every batch has a sequence as long as the batch is wide: the mask is [batch, time]
        mask = L.reshape(L.sequence_mask(n, dtype="float32"), [-1, 1])
        loss = L.elementwise_div(L.reduce_sum(L.elementwise_mul(ce, mask)), L.reduce_sum(mask))
        fluid.optimizer.Adam(0.02).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup)
    losses = []
    for it in range(80):
        t = 3 + it % 3
        lens = rng.randint(1, t + 1, size=8)
        lens[0] = t
        ids = rng.randint(0, V, size=(8, t))
        for i, k in enumerate(lens):
            ids[i, k:] = 0
        shifted = np.concatenate([np.full((8, 1), V), ids[:, :-1]], axis=1)
        feed = {"src": ids, "trg_in": shifted, "label": ids, "n": lens.astype("int64")}
        losses.append(float(exe.run(main, feed=feed, fetch_list=[loss])[0]))
    assert np.mean(losses[-10:]) < 0.7 * np.mean(losses[:10]), losses


# ---- dynamic_decode with a max step count known only at run time (a while loop)

V, E, K, START, END = 7, 4, 3, 0, 1


class TanhCell(L.RNNCell):
    def __init__(self, p):
        self.p, self.w = p, None

    def call(self, inputs, states):
        if self.w is None:
            init = fluid.initializer.NumpyArrayInitializer
            self.w = L.create_parameter([E, H], "float64", name="cell_w",
                                        default_initializer=init(self.p["w"]))
            self.u = L.create_parameter([H, H], "float64", name="cell_u",
                                        default_initializer=init(self.p["u"]))
        h = L.tanh(L.elementwise_add(L.matmul(inputs, self.w), L.matmul(states, self.u)))
        return h, h


def decode(p, h0, steps):
    """steps: an int (unrolled), 'var' (a fed int64 Variable holding 6) or None."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        h = fluid.data("h0", [None, H], dtype="float64")
        init = fluid.initializer.NumpyArrayInitializer
        emb_w = L.create_parameter([V, E], "float64", name="emb",
                                   default_initializer=init(p["emb"]))
        out_w = L.create_parameter([H, V], "float64", name="out",
                                   default_initializer=init(p["o"]))
        decoder = L.BeamSearchDecoder(
            TanhCell(p), START, END, K, embedding_fn=lambda ids: L.gather(emb_w, L.reshape(
                ids, [-1])), output_fn=lambda x: L.matmul(x, out_w))
        limit = fluid.data("limit", [1], dtype="int64") if steps == "var" else steps
        ids, final, lens = L.dynamic_decode(decoder, inits=h, max_step_num=limit,
                                            return_length=True)
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        feed = {"h0": h0}
        if steps == "var":
            feed["limit"] = np.array([6], "int64")
        return exe.run(main, feed=feed, fetch_list=[ids, final.log_probs, lens])


def decode_weights(seed, end_bias):
    rng = np.random.RandomState(seed)
    p = {"emb": rng.randn(V, E), "w": rng.randn(E, H), "u": rng.randn(H, H) * 0.5,
         "o": rng.randn(H, V) * 1.5}
    if end_bias:  # h > 0 always, and the end token's logit grows with it: every beam ends
        p.update(emb=abs(p["emb"]), w=abs(p["w"]), u=abs(p["u"]))
        p["o"][:, END] = abs(p["o"][:, END]) + end_bias
    return {k: v.astype(np.float32).astype(np.float64) for k, v in p.items()}


def test_dynamic_decode_with_a_variable_step_limit_equals_unrolled():
    p = decode_weights(11, 0.0)
    h0 = np.random.RandomState(12).randn(B, H)
    want = decode(p, h0, 6)
    got = decode(p, h0, "var")
    assert got[0].shape == want[0].shape == (B, 6, K)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_array_equal(got[2], want[2])


def test_dynamic_decode_without_limit_stops_when_all_finished():
    p = decode_weights(13, 0.5)
    h0 = abs(np.random.RandomState(14).randn(B, H))
    got = decode(p, h0, None)
    steps = got[0].shape[1]
    assert got[2].max() == steps and steps < 40  # the last beam ended at the last step
    want = decode(p, h0, steps)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_allclose(got[1], want[1], rtol=1e-12)
    np.testing.assert_array_equal(got[2], want[2])
    with pytest.raises(TypeError, match="dynamic_decode: max_step_num"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            L.dynamic_decode(None, max_step_num=fluid.data("f", [1], dtype="float32"))
