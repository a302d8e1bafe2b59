"""layers.rnn over a time dimension known only at run time (a while loop) against the unrolled
rnn, in float64: outputs, final states and parameter gradients, with and without
sequence_length, reversed and time-major; a seq2seq model on [-1, -1, H] inputs trains."""
import numpy as np
import pytest

import loom as fluid
from loom import layers as L
from op_test import OpTest

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


# ---- Fluid 1.x's LoD array ops and its hand-written dynamic RNN

LOD = [2, 5, 1, 3]
C = 2  # width of the per-sequence context the memory boots from


def lod_rows(seed, width):
    return np.random.RandomState(seed).randn(sum(LOD), width)


def test_lod_array_ops_match_numpy():
    x = lod_rows(20, D)
    m = np.random.RandomState(21).randn(len(LOD), H)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xv = fluid.data("x", [None, D], dtype="float64", lod_level=1)
        mv = fluid.data("m", [None, H], dtype="float64")
        table = L.lod_rank_table(xv)
        longest = L.max_sequence_len(table)
        arr = L.lod_tensor_to_array(xv, table)
        two = L.fill_constant([1], "int64", 2)
        step2 = L.array_read(arr, two)
        back = L.array_to_lod_tensor(arr, table)
        shrunk = L.shrink_memory(mv, two, table)
        reordered = L.reorder_lod_tensor_by_rank(mv, table)
        n = L.array_length(arr)
    got = fluid.Executor(fluid.CPUPlace()).run(
        main, feed={"x": fluid.create_lod_tensor(x, [LOD], fluid.CPUPlace()), "m": m},
        fetch_list=[table, longest, step2, back, shrunk, reordered, n], return_numpy=False)
    order = sorted(range(len(LOD)), key=lambda k: -LOD[k])  # stable: longest first
    np.testing.assert_array_equal(np.array(got[0]), [[k, LOD[k]] for k in order])
    assert int(np.array(got[1])[0]) == max(LOD) == int(np.array(got[6])[0])
    starts = np.concatenate([[0], np.cumsum(LOD)[:-1]])
    np.testing.assert_array_equal(np.array(got[2]),
                                  x[[starts[k] + 2 for k in order if LOD[k] > 2]])
    np.testing.assert_array_equal(np.array(got[3]), x)
    assert got[3].recursive_sequence_lengths() == [LOD]
    np.testing.assert_array_equal(np.array(got[4]), m[:2])  # two sequences longer than 2
    np.testing.assert_array_equal(np.array(got[5]), m[order])


def test_lod_array_errors_are_named():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        xv = fluid.data("x", [None, D], dtype="float64", lod_level=1)
        with pytest.raises(TypeError, match="lod_tensor_to_array: table 'x' is not a rank table"):
            L.lod_tensor_to_array(xv, xv)
        with pytest.raises(TypeError, match="array_to_lod_tensor: 'x' is not a tensor array"):
            L.array_to_lod_tensor(xv, L.lod_rank_table(xv))
        with pytest.raises(ValueError, match="lod_rank_table: level"):
            L.lod_rank_table(xv, level=-1)
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        xv = fluid.data("x", [None, D], dtype="float64", lod_level=1)
        table = L.lod_rank_table(xv, level=1)
    with pytest.raises(Exception, match="level 1 is not a level of the LoD of X"):
        fluid.Executor(fluid.CPUPlace()).run(
            main, feed={"x": fluid.create_lod_tensor(lod_rows(1, D), [LOD], fluid.CPUPlace())},
            fetch_list=[table])


def rnn_weights(seed):
    rng = np.random.RandomState(seed)
    return {"wi": rng.randn(D, D) * 0.5, "wx": rng.randn(D, H) * 0.5, "wh": rng.randn(H, H) * 0.5,
            "b": rng.randn(H) * 0.1, "wb": rng.randn(C, H) * 0.5,
            "r": rng.randn(sum(LOD), H)}


def named(name, value):
    return fluid.ParamAttr(name=name,
                           initializer=fluid.initializer.NumpyArrayInitializer(value))


def classic_rnn(x, ctx, p):
    """Fluid 1.x's dynamic RNN by hand: rank table, arrays, While, shrink_memory."""
    words = L.fc(x, D, param_attr=named("wi", p["wi"]), bias_attr=False)
    boot = L.fc(ctx, H, param_attr=named("wb", p["wb"]), bias_attr=False)
    table = L.lod_rank_table(words)
    steps = L.lod_tensor_to_array(words, table)
    n = L.max_sequence_len(table)
    mem = L.reorder_lod_tensor_by_rank(boot, table)
    outs = L.create_array(words.dtype)
    i = L.fill_constant([1], "int64", 0)
    cond = L.less_than(i, n)
    loop = L.While(cond)
    with loop.block():
        word = L.array_read(steps, i)
        prev = L.shrink_memory(mem, i, table)
        h = L.fc([word, prev], H, act="tanh",
                 param_attr=[named("wx", p["wx"]), named("wh", p["wh"])],
                 bias_attr=named("b", p["b"]))
        L.array_write(h, i, outs)
        L.assign(h, mem)
        L.increment(i)
        L.less_than(i, n, cond=cond)
    return L.array_to_lod_tensor(outs, table)


def drnn_reference(x, ctx, p):
    words = L.fc(x, D, param_attr=named("wi", p["wi"]), bias_attr=False)
    boot = L.fc(ctx, H, param_attr=named("wb", p["wb"]), bias_attr=False)
    drnn = L.DynamicRNN()
    with drnn.block():
        word = drnn.step_input(words)
        prev = drnn.memory(init=boot, need_reorder=True)
        h = L.fc([word, prev], H, act="tanh",
                 param_attr=[named("wx", p["wx"]), named("wh", p["wh"])],
                 bias_attr=named("b", p["b"]))
        drnn.update_memory(prev, h)
        drnn.output(h)
    return drnn()


GRADS = ["wi@GRAD", "wb@GRAD", "wx@GRAD", "wh@GRAD", "b@GRAD"]


def run_lod_rnn(build, p, x, ctx, grads=True):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = fluid.data("x", [None, D], dtype="float64", lod_level=1)
        cv = fluid.data("c", [None, C], dtype="float64")
        rv = fluid.data("r", [None, H], dtype="float64", lod_level=1)
        out = build(xv, cv, p)
        loss = L.reduce_sum(L.elementwise_mul(out, rv))
        if grads:
            fluid.backward.append_backward(loss)
    place = fluid.CPUPlace()
    feed = {"x": fluid.create_lod_tensor(x, [LOD], place), "c": ctx,
            "r": fluid.create_lod_tensor(p["r"], [LOD], place)}
    with fluid.scope_guard(fluid.Scope()):
        exe = fluid.Executor(place)
        exe.run(startup)
        return exe.run(main, feed=feed, fetch_list=[loss, out] + (GRADS if grads else []),
                       return_numpy=False)


def test_classic_lod_array_rnn_equals_dynamic_rnn():
    p = {k: v.astype(np.float32).astype(np.float64) for k, v in rnn_weights(22).items()}
    x, ctx = lod_rows(23, D), np.random.RandomState(24).randn(len(LOD), C)
    got = run_lod_rnn(classic_rnn, p, x, ctx)
    want = run_lod_rnn(drnn_reference, p, x, ctx)
    assert got[1].recursive_sequence_lengths() == [LOD]
    np.testing.assert_allclose(np.array(got[0]), np.array(want[0]), rtol=1e-12)
    np.testing.assert_allclose(np.array(got[1]), np.array(want[1]), rtol=1e-12, atol=1e-13)
    for g, w, name in zip(got[2:], want[2:], GRADS):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-10, atol=1e-12,
                                   err_msg=name)


def test_classic_lod_array_rnn_gradients_match_finite_differences():
    p = {k: v.astype(np.float32).astype(np.float64) for k, v in rnn_weights(25).items()}
    x, ctx = lod_rows(26, D), np.random.RandomState(27).randn(len(LOD), C)
    analytic = run_lod_rnn(classic_rnn, p, x, ctx)
    rng = np.random.RandomState(28)
    eps = 1e-6
    for name, g in zip(["wi", "wb", "wx", "wh", "b"], analytic[2:]):
        g = np.array(g)
        for _ in range(2):
            idx = tuple(rng.randint(0, s) for s in p[name].shape)
            # NumpyArrayInitializer goes through float32: perturb by a float32-exact step
            up, down = dict(p), dict(p)
            up[name], down[name] = p[name].copy(), p[name].copy()
            up[name][idx] += eps
            down[name][idx] -= eps
            fu = float(np.array(run_lod_rnn(classic_rnn, up, x, ctx, grads=False)[0]))
            fd = float(np.array(run_lod_rnn(classic_rnn, down, x, ctx, grads=False)[0]))
            delta = float(np.float32(p[name][idx] + eps)) - float(np.float32(p[name][idx] - eps))
            np.testing.assert_allclose((fu - fd) / delta, g[idx], rtol=1e-3, atol=1e-5,
                                       err_msg="%s%r" % (name, idx))


def test_classic_lod_array_rnn_trains():
    rng = np.random.RandomState(29)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 1
    with fluid.program_guard(main, startup):
        x = fluid.data("x", [None, 1], dtype="float32", lod_level=1)
        y = fluid.data("y", [None, 1], dtype="int64")
        table = L.lod_rank_table(x)
        steps = L.lod_tensor_to_array(x, table)
        n = L.max_sequence_len(table)
        mem = L.reorder_lod_tensor_by_rank(
            L.fill_constant_batch_size_like(L.sequence_last_step(x), [-1, 8], "float32", 0.0),
            table)
        outs = L.create_array("float32")
        i = L.fill_constant([1], "int64", 0)
        cond = L.less_than(i, n)
        loop = L.While(cond)
        with loop.block():
            prev = L.shrink_memory(mem, i, table)
            h = L.fc([L.array_read(steps, i), prev], 8, act="tanh")
            L.array_write(h, i, outs)
            L.assign(h, mem)
            L.increment(i)
            L.less_than(i, n, cond=cond)
        last = L.sequence_last_step(L.array_to_lod_tensor(outs, table))
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


def test_lod_tensor_array_host_class():
    arr = fluid.LoDTensorArray()
    arr.append(np.arange(6.0).reshape(3, 2))
    arr.append(fluid.create_lod_tensor(np.ones((3, 1)), [[1, 2]], fluid.CPUPlace()))
    assert len(arr) == 2
    np.testing.assert_array_equal(np.array(arr[0]), np.arange(6.0).reshape(3, 2))
    assert arr[1].recursive_sequence_lengths() == [[1, 2]]
    with pytest.raises(TypeError, match="LoDTensorArray.append"):
        arr.append([1, 2])


def classic_rnn_memory_array(x, ctx, p, next_index_of_its_own=True):
    """The memory kept in an array too (Fluid's own DynamicRNN layout): read at step i,
    written at i + 1."""
    words = L.fc(x, D, param_attr=named("wi", p["wi"]), bias_attr=False)
    boot = L.fc(ctx, H, param_attr=named("wb", p["wb"]), bias_attr=False)
    table = L.lod_rank_table(words)
    steps = L.lod_tensor_to_array(words, table)
    n = L.max_sequence_len(table)
    mems = L.array_write(L.reorder_lod_tensor_by_rank(boot, table),
                         i=L.fill_constant([1], "int64", 0))
    outs = L.create_array(words.dtype)
    i = L.fill_constant([1], "int64", 0)
    cond = L.less_than(i, n)
    loop = L.While(cond)
    with loop.block():
        prev = L.shrink_memory(L.array_read(mems, i), i, table)
        h = L.fc([L.array_read(steps, i), prev], H, act="tanh",
                 param_attr=[named("wx", p["wx"]), named("wh", p["wh"])],
                 bias_attr=named("b", p["b"]))
        L.array_write(h, i, outs)
        if next_index_of_its_own:
            nxt = L.increment(i, in_place=False)
            L.array_write(h, nxt, mems)
            L.assign(nxt, i)
        else:  # Fluid's order: the write's gradient would read the step it began with
            L.increment(i)
            L.array_write(h, i, mems)
        L.less_than(i, n, cond=cond)
    return L.array_to_lod_tensor(outs, table)


def test_memory_in_an_array_equals_dynamic_rnn():
    p = {k: v.astype(np.float32).astype(np.float64) for k, v in rnn_weights(30).items()}
    x, ctx = lod_rows(31, D), np.random.RandomState(32).randn(len(LOD), C)
    got = run_lod_rnn(classic_rnn_memory_array, p, x, ctx)
    want = run_lod_rnn(drnn_reference, p, x, ctx)
    np.testing.assert_allclose(np.array(got[1]), np.array(want[1]), rtol=1e-12, atol=1e-13)
    for g, w, name in zip(got[2:], want[2:], GRADS):
        np.testing.assert_allclose(np.array(g), np.array(w), rtol=1e-10, atol=1e-12,
                                   err_msg=name)
    with pytest.raises(Exception, match="the gradient of op 'write_to_array'.*overwrites "
                                        "earlier in the loop body"):
        run_lod_rnn(lambda a, b, q: classic_rnn_memory_array(a, b, q, False), p, x, ctx)


def test_fetching_an_array_gives_a_lod_tensor_array():
    x = lod_rows(40, D)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xv = fluid.data("x", [None, D], dtype="float64", lod_level=1)
        table = L.lod_rank_table(xv)
        arr = L.lod_tensor_to_array(xv, table)
        empty = L.create_array("float32")
    exe = fluid.Executor(fluid.CPUPlace())
    feed = {"x": fluid.create_lod_tensor(x, [LOD], fluid.CPUPlace())}
    got, nothing, back = exe.run(main, feed=feed, fetch_list=[arr, empty, arr],
                                 return_numpy=False)
    assert isinstance(got, fluid.LoDTensorArray) and len(got) == max(LOD)
    assert len(nothing) == 0
    as_numpy = exe.run(main, feed=feed, fetch_list=[arr])[0]
    order = sorted(range(len(LOD)), key=lambda k: -LOD[k])
    starts = np.concatenate([[0], np.cumsum(LOD)[:-1]])
    for t in range(max(LOD)):
        want = x[[starts[k] + t for k in order if LOD[k] > t]]
        np.testing.assert_array_equal(np.array(got[t]), want)
        np.testing.assert_array_equal(np.array(back[t]), want)
        np.testing.assert_array_equal(as_numpy[t], want)


TABLE = np.array([[1, 5], [3, 3], [0, 2], [2, 1]], "int64")  # the rank table of LOD


def test_reorder_lod_tensor_by_rank_op():
    x = np.random.RandomState(50).randn(len(LOD), H)
    t = OpTest(lambda x, t: L.reorder_lod_tensor_by_rank(x, t), {"x": x, "t": TABLE})
    t.check_forward(x[TABLE[:, 0]])
    t.check_grad()


@pytest.mark.parametrize("step,running", [(0, 4), (2, 2), (4, 1)])
def test_shrink_memory_op(step, running):
    x = np.random.RandomState(51).randn(len(LOD), H)
    t = OpTest(lambda x, i, t: L.reshape(L.shrink_memory(x, i, t), [running, H]),
               {"x": x, "i": np.array([step], "int64"), "t": TABLE})
    t.check_forward(x[:running])
    t.check_grad()


def test_an_array_read_twice_is_a_named_backward_error():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.data("x", [None, D], dtype="float64")
        w = L.create_parameter([D, D], "float64")
        zero = L.fill_constant([1], "int64", 0)
        arr = L.array_write(L.matmul(x, w), zero)
        loss = L.reduce_sum(L.elementwise_add(L.array_read(arr, zero), L.array_read(arr, zero)))
        with pytest.raises(Exception, match="array gradients are not summed"):
            fluid.backward.append_backward(loss)


def test_birnn_with_unknown_time_equals_unrolled():
    x = np.random.RandomState(60).randn(B, T, D)

    def run(time_dim):
        main, startup = fluid.Program(), fluid.Program()
        main.random_seed = startup.random_seed = 3
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            xv = fluid.data("x", [None, time_dim, D], dtype="float64")
            n = fluid.data("n", [B], dtype="int64")
            out, _ = L.birnn(L.GRUCell(H, dtype="float64", name="fw"),
                             L.GRUCell(H, dtype="float64", name="bw"), xv, sequence_length=n)
            loss = L.reduce_sum(L.square(out))
            fluid.backward.append_backward(loss)
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            return exe.run(main, feed={"x": x, "n": np.array(LENS, "int64")},
                           fetch_list=[out, "fw.gate_w@GRAD", "bw.cand_w@GRAD"])

    for g, w in zip(run(None), run(T)):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("use_stack", [False, True])
def test_tensor_array_to_tensor_gradient(use_stack):
    rng = np.random.RandomState(70)
    a, b = rng.randn(2, 3), rng.randn(2, 3) if use_stack else rng.randn(2, 1)

    def build(a, b):
        arr = L.array_write(a, L.fill_constant([1], "int64", 0))
        L.array_write(b, L.fill_constant([1], "int64", 1), array=arr)
        out = L.tensor_array_to_tensor(arr, axis=1, use_stack=use_stack)[0]
        return L.reshape(out, [2, 2, 3] if use_stack else [2, 4])

    t = OpTest(build, {"a": a, "b": b})
    t.check_forward(np.stack([a, b], axis=1) if use_stack else np.concatenate([a, b], axis=1))
    t.check_grad()


class GreedyDecoder(L.Decoder):
    """A user decoder through dynamic_decode's generic path (finished, lengths, impute)."""

    def __init__(self, cell, embed, project):
        self.cell, self.embed, self.project = cell, embed, project

    def initialize(self, inits):
        start = L.fill_constant_batch_size_like(inits, [-1], "int64", START)
        finished = L.cast(L.fill_constant_batch_size_like(inits, [-1], "float32", 0.0), "bool")
        return self.embed(start), inits, finished

    def step(self, time, inputs, states, **kwargs):
        out, new_states = self.cell(inputs, states)
        tok = L.argmax(self.project(out), axis=1)
        done = L.equal(tok, L.fill_constant([1], "int64", END))
        return tok, new_states, self.embed(tok), done


@pytest.mark.parametrize("impute", [False, True])
def test_user_decoder_while_loop_equals_unrolled(impute):
    p = decode_weights(80, 0.0)
    p["o"][:, END] += 1.0
    h0 = np.random.RandomState(81).randn(B, H)

    def run(steps):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            h = fluid.data("h0", [None, H], dtype="float64")
            init = fluid.initializer.NumpyArrayInitializer
            emb_w = L.create_parameter([V, E], "float64", name="emb",
                                       default_initializer=init(p["emb"]))
            out_w = L.create_parameter([H, V], "float64", name="out",
                                       default_initializer=init(p["o"]))
            dec = GreedyDecoder(TanhCell(p), lambda ids: L.gather(emb_w, ids),
                                lambda x: L.matmul(x, out_w))
            limit = fluid.data("limit", [1], dtype="int64") if steps == "var" else steps
            toks, final, lens = L.dynamic_decode(dec, inits=h, max_step_num=limit,
                                                 impute_finished=impute, return_length=True)
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            feed = {"h0": h0}
            if steps == "var":
                feed["limit"] = np.array([5], "int64")
            return exe.run(main, feed=feed, fetch_list=[toks, final, lens])

    got, want = run("var"), run(5)
    assert got[0].shape == (B, 5)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-14)


def test_nested_sequences_split_by_sub_sequence():
    # 3 sequences of 2, 1 and 3 sub-sequences (rows 1, 2 | 3 | 1, 1, 2): step t of a
    # sequence is its sub-sequence t, which keeps its own LoD in the element
    outer, inner = [2, 1, 3], [1, 2, 3, 1, 1, 2]
    rng = np.random.RandomState(90)
    x, r = rng.randn(sum(inner), D), rng.randn(sum(inner), D)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup):
        xv = fluid.data("x", [None, D], dtype="float64", lod_level=2)
        xv.stop_gradient = False
        rv = fluid.data("r", [None, D], dtype="float64", lod_level=2)
        table = L.lod_rank_table(xv)
        arr = L.lod_tensor_to_array(xv, table)
        back = L.array_to_lod_tensor(arr, table)
        loss = L.reduce_sum(L.elementwise_mul(back, rv))
        fluid.backward.append_backward(loss)
    place = fluid.CPUPlace()
    got_arr, got_back, dx = fluid.Executor(place).run(
        main, feed={"x": fluid.create_lod_tensor(x, [outer, inner], place),
                    "r": fluid.create_lod_tensor(r, [outer, inner], place)},
        fetch_list=[arr, back, xv.name + "@GRAD"], return_numpy=False)
    units = np.concatenate([[0], np.cumsum(inner)])  # rows of each sub-sequence
    first = np.concatenate([[0], np.cumsum(outer)])  # first sub-sequence of each sequence
    order = [2, 0, 1]
    assert len(got_arr) == 3
    for t in range(3):
        us = [first[i] + t for i in order if outer[i] > t]
        want = np.concatenate([x[units[u]:units[u + 1]] for u in us])
        np.testing.assert_array_equal(np.array(got_arr[t]), want)
        assert got_arr[t].recursive_sequence_lengths() == [[inner[u] for u in us]]
    np.testing.assert_array_equal(np.array(got_back), x)
    assert got_back.recursive_sequence_lengths() == [outer, inner]
    np.testing.assert_array_equal(np.array(dx), r)
