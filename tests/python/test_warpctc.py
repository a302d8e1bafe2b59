"""warpctc (the CTC loss): its forward against a brute-force sum over alignments and a NumPy
forward algorithm (float64, to 1e-10), its gradient against central differences in LoD and
padded modes with and without norm_by_times, the unalignable-label convention, its argument
errors, and a toy sequence model trained with it whose greedy decoding recovers the labels."""
import itertools

import numpy as np
import pytest

import loom as fluid
from op_test import OpTest
from test_layer_attrs import check, set_attrs  # noqa: F401 (set_attrs is a fixture)

L = fluid.layers


# ---- NumPy references ----

def log_softmax(x):
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def collapse(path, blank):
    out = []
    for i, c in enumerate(path):
        if c != blank and (i == 0 or c != path[i - 1]):
            out.append(c)
    return out


def ctc_brute(x, label, blank):
    """-log of the sum over every path of len(x) steps that collapses to label."""
    p = np.exp(log_softmax(x))
    total = 0.0
    for path in itertools.product(range(x.shape[1]), repeat=x.shape[0]):
        if collapse(path, blank) == list(label):
            total += np.prod(p[np.arange(x.shape[0]), path])
    return 0.0 if total == 0 else -np.log(total)  # warp-ctc's 0 for no alignment


def ctc_forward(x, label, blank):
    """The CTC forward algorithm in probability space with per-step rescaling."""
    y = np.exp(log_softmax(x))
    z = [blank]
    for c in label:
        z += [c, blank]
    s_n, t_n = len(z), x.shape[0]
    if t_n == 0:
        return 0.0
    a = np.zeros(s_n)
    a[0] = y[0, z[0]]
    if s_n > 1:
        a[1] = y[0, z[1]]
    log_scale = np.log(a.sum())
    a /= a.sum()
    for t in range(1, t_n):
        b = a.copy()
        b[1:] += a[:-1]
        for s in range(2, s_n):
            if z[s] != blank and z[s] != z[s - 2]:
                b[s] += a[s - 2]
        a = b * y[t, z]
        if a.sum() == 0:
            return 0.0
        log_scale += np.log(a.sum())
        a /= a.sum()
    p = a[-1] + (a[-2] if s_n > 1 else 0.0)
    return 0.0 if p == 0 else -(np.log(p) + log_scale)


def lod(array, lengths):
    return fluid.create_lod_tensor(np.asarray(array), [list(lengths)], fluid.CPUPlace())


def rand_case(seed, lengths, label_lengths, classes, blank=0):
    rng = np.random.RandomState(seed)
    x = rng.uniform(-2, 2, (sum(lengths), classes))
    others = [c for c in range(classes) if c != blank]
    label = rng.choice(others, (sum(label_lengths), 1)).astype("int64")
    return x, label


def seqs(a, lengths):
    off = np.concatenate([[0], np.cumsum(lengths)])
    return [a[off[i]:off[i + 1]] for i in range(len(lengths))]


class LodCtc:
    """A program computing warpctc over LoD feeds, its weighted sum and x's gradient."""

    def __init__(self, classes, blank=0, norm_by_times=False, dtype="float64",
                 label_dtype="int64"):
        self.main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(self.main, startup), fluid.unique_name.guard():
            xv = fluid.data("x", [None, classes], dtype, lod_level=1)
            xv.stop_gradient = False
            lv = fluid.data("label", [None, 1], label_dtype, lod_level=1)
            self.loss = L.warpctc(xv, lv, blank=blank, norm_by_times=norm_by_times)
            w = fluid.data("w", [None, 1], dtype)
            self.total = L.reduce_sum(L.elementwise_mul(self.loss, w))
            fluid.backward.append_backward(self.total)
        self.exe, self.scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
        self.exe.run(startup, scope=self.scope)

    def run(self, x, xl, label, ll, w=None, fetch=None):
        w = np.ones((len(xl), 1), x.dtype) if w is None else w
        feed = {"x": lod(x, xl), "label": lod(label, ll), "w": w}
        return self.exe.run(self.main, feed=feed, scope=self.scope,
                            fetch_list=fetch or [self.loss, "x@GRAD"])


# ---- forward ----

@pytest.mark.parametrize("blank", [0, 2])
def test_forward_matches_brute_force_over_alignments(blank):
    xl, ll = [4, 3, 4, 2, 3, 1], [2, 1, 0, 2, 2, 1]
    x, label = rand_case(3, xl, ll, 3, blank)
    label[4:6, 0] = [c for c in range(3) if c != blank][0]  # a repeat: [c, c] needs 3 steps
    got, _ = LodCtc(3, blank).run(x, xl, label, ll)
    want = [ctc_brute(xs, ls.ravel(), blank) for xs, ls in zip(seqs(x, xl), seqs(label, ll))]
    assert got.shape == (6, 1)
    np.testing.assert_allclose(got.ravel(), want, rtol=1e-10, atol=1e-10)
    assert got[3, 0] == 0.0  # 2 labels, 2 steps, but they repeat: no alignment


def test_forward_matches_numpy_forward_algorithm_on_longer_sequences():
    xl, ll = [30, 17, 50, 8], [10, 5, 20, 0]
    x, label = rand_case(5, xl, ll, 7)
    x *= 3  # peaky distributions: log-space stability
    for label_dtype in ("int64", "int32"):
        got, _ = LodCtc(7, label_dtype=label_dtype).run(x, xl, label.astype(label_dtype), ll)
        want = [ctc_forward(xs, ls.ravel(), 0) for xs, ls in zip(seqs(x, xl), seqs(label, ll))]
        np.testing.assert_allclose(got.ravel(), want, rtol=1e-10, atol=1e-10)
    # the empty label: -sum_t log softmax(x)[t, blank]
    np.testing.assert_allclose(got[3, 0], -log_softmax(x[97:105])[:, 0].sum(), rtol=1e-12)


def test_float32_forward_and_large_logits_stay_finite():
    xl, ll = [40, 25], [12, 6]
    x, label = rand_case(9, xl, ll, 5)
    x *= 60  # softmax probabilities far below float's range: log space keeps the loss finite
    got, grad = LodCtc(5, dtype="float32").run(x.astype("float32"), xl, label, ll)
    want = [ctc_forward(xs, ls.ravel(), 0) for xs, ls in
            zip(seqs(x.astype("float32").astype("float64"), xl), seqs(label, ll))]
    assert np.all(np.isfinite(got)) and np.all(np.isfinite(grad))
    np.testing.assert_allclose(got.ravel(), want, rtol=1e-4)


def test_padded_mode_equals_lod_mode():
    xl, ll = [5, 3, 6], [2, 1, 3]
    x, label = rand_case(11, xl, ll, 4)
    lod_loss, _ = LodCtc(4).run(x, xl, label, ll)
    padded = np.zeros((6, 3, 4))
    plabel = np.zeros((3, 3), "int32")
    for b, (xs, ls) in enumerate(zip(seqs(x, xl), seqs(label, ll))):
        padded[:len(xs), b] = xs
        plabel[b, :len(ls)] = ls.ravel()
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        out = L.warpctc(fluid.data("x", [6, 3, 4], "float64"), fluid.data("l", [3, 3], "int32"),
                        input_length=fluid.data("xl", [3], "int64"),
                        label_length=fluid.data("ll", [3, 1], "int64"))
    assert list(out.shape) == [3, 1]
    exe = fluid.Executor(fluid.CPUPlace())
    got, = exe.run(main, feed={"x": padded, "l": plabel, "xl": np.array(xl, "int64"),
                               "ll": np.array(ll, "int64").reshape(3, 1)}, fetch_list=[out],
                   scope=fluid.Scope())
    np.testing.assert_allclose(got, lod_loss, rtol=1e-12, atol=1e-12)


# ---- gradients ----

@pytest.mark.parametrize("norm_by_times", [False, True])
def test_lod_gradient_matches_central_differences(norm_by_times):
    xl, ll = [5, 3, 4], [2, 1, 2]
    x, label = rand_case(13, xl, ll, 4)
    label[4:6, 0] = 3  # a repeated label in the last sequence
    w = np.array([[0.7], [1.3], [0.9]])
    net = LodCtc(4, norm_by_times=norm_by_times)
    _, analytic = net.run(x, xl, label, ll, w)
    numeric = np.zeros_like(x)
    eps = 1e-6
    for idx in np.ndindex(*x.shape):
        vals = []
        for d in (eps, -eps):
            p = x.copy()
            p[idx] += d
            vals.append(float(np.asarray(net.run(p, xl, label, ll, w, [net.total])[0]).sum()))
        numeric[idx] = (vals[0] - vals[1]) / (2 * eps)
    if norm_by_times:  # the loss is not normalized; the gradient is divided by each length
        numeric /= np.repeat(xl, xl)[:, None]
    np.testing.assert_allclose(analytic, numeric, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("norm_by_times", [False, True])
def test_padded_gradient_matches_central_differences(norm_by_times):
    xl, ll = np.array([4, 2, 5], "int64"), np.array([2, 1, 3], "int64")
    rng = np.random.RandomState(17)
    x = rng.uniform(-2, 2, (5, 3, 4))
    label = rng.randint(1, 4, (3, 3)).astype("int64")
    t = OpTest(lambda x, label, xl, ll: L.warpctc(x, label, norm_by_times=norm_by_times,
                                                  input_length=xl, label_length=ll),
               {"x": x, "label": label, "xl": xl, "ll": ll})
    want = [ctc_forward(x[:xl[b], b], label[b, :ll[b]], 0) for b in range(3)]
    t.check_forward(np.array(want).reshape(3, 1), rtol=1e-10, atol=1e-10)
    if not norm_by_times:
        t.check_grad()
        return
    plain = OpTest(lambda x, label, xl, ll: L.warpctc(x, label, input_length=xl,
                                                      label_length=ll),
                   {"x": x, "label": label, "xl": xl, "ll": ll})
    got, = t._run(["x@GRAD"])
    base, = plain._run(["x@GRAD"])
    plain.check_grad()
    np.testing.assert_allclose(got, base / xl[None, :, None], rtol=1e-12, atol=1e-14)
    assert np.all(got[2:, 1] == 0) and np.all(got[4:, 0] == 0)  # steps past each length


def test_unalignable_label_gives_zero_loss_and_gradient():
    # [1, 2, 3] needs 3 steps and [2, 2] needs 3 (a blank between): warp-ctc's and Fluid's
    # convention is a loss of 0 with no gradient, not inf.
    xl, ll = [2, 2, 3], [3, 2, 2]
    x = np.random.RandomState(2).uniform(-1, 1, (7, 4))
    label = np.array([1, 2, 3, 2, 2, 2, 2], "int64").reshape(7, 1)
    loss, grad = LodCtc(4).run(x, xl, label, ll)
    assert loss[0, 0] == 0 and loss[1, 0] == 0
    assert np.all(grad[:4] == 0)
    np.testing.assert_allclose(loss[2, 0], ctc_brute(x[4:], [2, 2], 0), rtol=1e-10)
    assert np.any(grad[4:] != 0)


# ---- errors ----

def build_only(build):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        build()


def test_argument_errors():
    x = lambda: fluid.data("x", [None, 4], "float64", lod_level=1)  # noqa: E731
    lab = lambda: fluid.data("l", [None, 1], "int64", lod_level=1)  # noqa: E731
    with pytest.raises(ValueError, match="warpctc.*blank 4 must be in \\[0, 4\\)"):
        build_only(lambda: L.warpctc(x(), lab(), blank=4))
    with pytest.raises(ValueError, match="warpctc: blank must be an int >= 0"):
        build_only(lambda: L.warpctc(x(), lab(), blank=-1))
    with pytest.raises(TypeError, match="warpctc: label 'l' must be int32 or int64"):
        build_only(lambda: L.warpctc(x(), fluid.data("l", [None, 1], "float32", lod_level=1)))
    with pytest.raises(TypeError, match="warpctc: input 'x' must be float32 or float64"):
        build_only(lambda: L.warpctc(fluid.data("x", [None, 4], "int64"), lab()))
    with pytest.raises(ValueError, match="warpctc: input_length and label_length go together"):
        build_only(lambda: L.warpctc(x(), lab(), input_length=fluid.data("n", [3], "int64")))
    with pytest.raises(ValueError, match="warpctc: with input_length, input 'x' must be padded"):
        build_only(lambda: L.warpctc(x(), lab(), input_length=fluid.data("n", [3], "int64"),
                                     label_length=fluid.data("m", [3], "int64")))
    with pytest.raises(TypeError, match="warpctc: input_length 'n' must be int64"):
        build_only(lambda: L.warpctc(fluid.data("x", [5, 3, 4], "float64"),
                                     fluid.data("l", [3, 2], "int64"),
                                     input_length=fluid.data("n", [3], "int32"),
                                     label_length=fluid.data("m", [3], "int64")))
    with pytest.raises(ValueError, match="warpctc.*batch of 3 but .*Label.* has 2"):
        build_only(lambda: L.warpctc(fluid.data("x", [5, 3, 4], "float64"),
                                     fluid.data("l", [2, 2], "int64"),
                                     input_length=fluid.data("n", [3], "int64"),
                                     label_length=fluid.data("m", [3], "int64")))

    net = LodCtc(4, blank=0)
    x4 = np.zeros((5, 4))
    with pytest.raises(ValueError, match="warpctc.*Label value 4 .*sequence 1.* in \\[0, 4\\)"):
        net.run(x4, [2, 3], np.array([[1], [4]]), [1, 1])
    with pytest.raises(ValueError, match="warpctc.*Label value 0 .*other than blank 0"):
        net.run(x4, [2, 3], np.array([[1], [0]]), [1, 1])
    with pytest.raises(ValueError, match="warpctc.*Logits has 2 sequences but Label has 3"):
        net.run(x4, [2, 3], np.array([[1], [2], [3]]), [1, 1, 1])


def test_padded_length_errors():
    def run(xl, ll):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            out = L.warpctc(fluid.data("x", [4, 2, 3], "float64"),
                            fluid.data("l", [2, 2], "int64"),
                            input_length=fluid.data("xl", [len(xl)], "int64"),
                            label_length=fluid.data("ll", [len(ll)], "int64"))
        feed = {"x": np.zeros((4, 2, 3)), "l": np.ones((2, 2), "int64"),
                "xl": np.array(xl, "int64"), "ll": np.array(ll, "int64")}
        fluid.Executor(fluid.CPUPlace()).run(main, feed=feed, fetch_list=[out],
                                             scope=fluid.Scope())
    with pytest.raises(ValueError, match="warpctc.*LogitsLength\\[1\\] = 5 is outside \\[0, 4\\]"):
        run([4, 5], [1, 1])
    with pytest.raises(ValueError, match="warpctc.*LabelLength\\[0\\] = 3 is outside \\[0, 2\\]"):
        run([4, 4], [3, 1])
    with pytest.raises(ValueError, match="warpctc.*LabelLength has 3 lengths for a batch of 2"):
        run([4, 4], [1, 1, 1])


def test_attrs_match_the_registry(set_attrs):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 4], "float32", lod_level=1)
        x.stop_gradient = False
        loss = L.warpctc(x, fluid.data("l", [None, 1], "int32", lod_level=1), blank=3,
                         norm_by_times=True)
        L.warpctc(fluid.data("p", [5, 2, 4]), fluid.data("pl", [2, 3], "int32"),
                  input_length=fluid.data("n", [2], "int64"),
                  label_length=fluid.data("m", [2], "int64"))
        fluid.backward.append_backward(L.mean(loss))
    assert "warpctc_grad" in [op.type for op in main.global_block().ops]
    check(set_attrs, [("main", main), ("startup", startup)], "layers.warpctc")


# ---- training ----

def toy_batch(rng, labels, classes):
    """Frames whose noisy one-hot features name the symbol shown (2 frames per label, a blank
    frame after each): a per-frame classifier trained with CTC can learn to transcribe them."""
    frames, lengths = [], []
    for lab in labels:
        seq = []
        for c in lab:
            seq += [c, c, 0]
        frames.append(np.eye(classes)[seq] + rng.normal(0, 0.1, (len(seq), classes)))
        lengths.append(len(seq))
    return np.concatenate(frames).astype("float32"), lengths


def test_training_with_warpctc_decreases_loss_and_greedy_decoding_recovers_labels():
    classes = 4  # blank 0 and symbols 1..3
    labels = [[1, 2], [3, 1, 3], [2, 2], [1], [3, 2, 1, 1]]
    rng = np.random.RandomState(0)
    feats, xl = toy_batch(rng, labels, classes)
    flat = np.array([c for lab in labels for c in lab], "int64").reshape(-1, 1)
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        fv = fluid.data("f", [None, classes], "float32", lod_level=1)
        lv = fluid.data("l", [None, 1], "int64", lod_level=1)
        hidden = L.fc(fv, 16, act="tanh")
        logits = L.fc(hidden, classes)
        loss = L.mean(L.warpctc(logits, lv, blank=0, norm_by_times=True))
        decoded = L.ctc_greedy_decoder(L.softmax(logits), blank=0)
        test_prog = main.clone(for_test=True)
        fluid.optimizer.Adam(0.05).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"f": lod(feats, xl), "l": lod(flat, [len(lab) for lab in labels])}
    losses = [float(np.asarray(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]))
              for _ in range(80)]
    assert losses[-1] < 0.2 * losses[0], losses[::10]
    out, = exe.run(test_prog, feed=feed, fetch_list=[decoded], scope=scope, return_numpy=False)
    assert out.recursive_sequence_lengths() == [[len(lab) for lab in labels]]
    assert np.array(out).ravel().tolist() == [c for lab in labels for c in lab]
