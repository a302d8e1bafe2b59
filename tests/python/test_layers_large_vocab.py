"""Large-vocabulary losses (nce, hsigmoid, sampled_softmax_with_cross_entropy), data_norm,
spectral_norm and the auc layer: NumPy references, finite-difference gradients (float64, fixed
sampling seeds), argument errors, and small word-prediction models that train."""
import numpy as np
import pytest

import loom as fluid
from loom import core
from op_test import OpTest


def _op(program, op_type):
    return [op for op in program.global_block().ops if op.type == op_type][0]


# ---------------------------------------------------------------------------------------------
# nce

def _nce_q(sampler, classes, c, probs=None):
    if sampler == "uniform":
        return 1.0 / classes
    if sampler == "log_uniform":
        return np.log((c + 2.0) / (c + 1.0)) / np.log(classes)
    return probs[c]


def _nce_ref(x, w, b, labels, num_true, neg, sampler, classes, probs=None, sw=None):
    n, cols = labels.shape
    cost = np.zeros((n, 1))
    for i in range(n):
        for j in range(cols):
            c = labels[i, j]
            o = 1.0 / (1.0 + np.exp(-(x[i] @ w[c] + (b[c, 0] if b is not None else 0.0))))
            q = _nce_q(sampler, classes, c, probs) * neg
            cost[i, 0] += -np.log(o / (o + q)) if j < num_true else -np.log(q / (o + q))
        cost[i, 0] *= 1.0 if sw is None else sw[i]
    return cost / (neg + 1)


@pytest.mark.parametrize("sampler", ["uniform", "log_uniform", "custom_dist"])
def test_nce_forward_matches_numpy_and_is_deterministic(sampler):
    rng = np.random.RandomState(1)
    n, d, classes, neg, num_true = 4, 3, 7, 5, 2
    x = rng.randn(n, d)
    labels = rng.randint(0, classes, (n, num_true)).astype("int64")
    w = rng.randn(classes, d) * 0.5
    b = rng.randn(classes, 1) * 0.1
    probs = rng.rand(classes) + 0.1
    probs /= probs.sum()
    sw = rng.rand(n, 1) + 0.5
    ot = OpTest(lambda x, label, sw: fluid.layers.nce(
        x, label, classes, sample_weight=sw, num_neg_samples=neg, sampler=sampler,
        custom_dist=probs if sampler == "custom_dist" else None, seed=11),
        {"x": x, "label": labels, "sw": sw}, params={"w_0": w, "b_0": b})
    name = _op(ot.main, "nce").output("SampleLabels")[0]
    cost, samples = ot._run([ot.outs[0], name])
    cost2, samples2 = ot._run([ot.outs[0], name])
    np.testing.assert_array_equal(samples, samples2)
    np.testing.assert_array_equal(cost, cost2)
    assert samples.shape == (n, num_true + neg)
    np.testing.assert_array_equal(samples[:, :num_true], labels)
    assert samples.min() >= 0 and samples.max() < classes
    # The probabilities are float32 in the program, as Fluid's.
    ref_probs = probs.astype("float32").astype("float64")
    np.testing.assert_allclose(cost, _nce_ref(x, w, b, samples, num_true, neg, sampler, classes,
                                              ref_probs, sw.ravel()), rtol=1e-10)


def test_nce_samplers_follow_their_distributions():
    classes, neg = 6, 2000
    x = np.zeros((1, 2))
    label = np.zeros((1, 1), "int64")
    probs = np.array([0.5, 0.1, 0.1, 0.1, 0.1, 0.1])
    for sampler, expected in [("uniform", np.full(classes, 1.0 / classes)),
                              ("custom_dist", probs)]:
        ot = OpTest(lambda x, label: fluid.layers.nce(
            x, label, classes, num_neg_samples=neg, sampler=sampler, custom_dist=probs, seed=3),
            {"x": x, "label": label})
        (samples,) = ot._run([_op(ot.main, "nce").output("SampleLabels")[0]])
        freq = np.bincount(samples[0, 1:], minlength=classes) / float(neg)
        np.testing.assert_allclose(freq, expected, atol=0.04)
    ot = OpTest(lambda x, label: fluid.layers.nce(
        x, label, classes, num_neg_samples=neg, sampler="log_uniform", seed=3),
        {"x": x, "label": label})
    (samples,) = ot._run([_op(ot.main, "nce").output("SampleLabels")[0]])
    freq = np.bincount(samples[0, 1:], minlength=classes)
    assert freq[0] > freq[1] > freq[3]  # small ids are frequent


@pytest.mark.parametrize("sampler", ["uniform", "log_uniform"])
def test_nce_gradient(sampler):
    rng = np.random.RandomState(2)
    n, d, classes = 3, 4, 9
    x = rng.randn(n, d)
    labels = rng.randint(0, classes, (n, 1)).astype("int64")
    ot = OpTest(lambda x, label: fluid.layers.nce(x, label, classes, num_neg_samples=4,
                                                  sampler=sampler, seed=5),
                {"x": x, "label": labels},
                params={"w_0": rng.randn(classes, d) * 0.5, "b_0": rng.randn(classes, 1) * 0.1})
    ot.check_grad(rtol=1e-5, atol=1e-8)


def test_nce_gradient_with_sample_weight_and_no_bias():
    rng = np.random.RandomState(3)
    n, d, classes = 3, 2, 5
    probs = np.array([0.3, 0.3, 0.2, 0.1, 0.1])
    ot = OpTest(lambda x, label, sw: fluid.layers.nce(
        x, label, classes, sample_weight=sw, bias_attr=False, num_neg_samples=3,
        sampler="custom_dist", custom_dist=probs, seed=9),
        {"x": rng.randn(n, d), "label": rng.randint(0, classes, (n, 2)).astype("int64"),
         "sw": rng.rand(n) + 0.5}, params={"w_0": rng.randn(classes, d) * 0.5}, no_grad=["sw"])
    assert not [p for p in ot.main.global_block().all_parameters() if p.name.endswith("b_0")]
    ot.check_grad(rtol=1e-5, atol=1e-8)


def test_nce_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [4])
        label = fluid.layers.data("label", [1], dtype="int64")
        flabel = fluid.layers.data("flabel", [1])
        with pytest.raises(ValueError, match="nce: sampler"):
            fluid.layers.nce(x, label, 10, sampler="zipf")
        with pytest.raises(ValueError, match="nce: sampler='custom_dist' needs custom_dist"):
            fluid.layers.nce(x, label, 10, sampler="custom_dist")
        with pytest.raises(ValueError, match="nce: custom_dist holds 3"):
            fluid.layers.nce(x, label, 10, sampler="custom_dist", custom_dist=[0.2, 0.3, 0.5])
        with pytest.raises(TypeError, match="nce: label must be int64"):
            fluid.layers.nce(x, flabel, 10)
        with pytest.raises(ValueError, match="nce: num_neg_samples"):
            fluid.layers.nce(x, label, 10, num_neg_samples=0)
        with pytest.raises(TypeError, match="nce: input must be a Variable"):
            fluid.layers.nce(np.zeros((2, 4)), label, 10)


def _word_model(loss_fn, vocab=40, steps=30, sparse=False, lr=0.5):
    """Predicts the next word (3 * w + 1 mod vocab) of a word; returns the losses of the steps."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        word = fluid.layers.data("word", [1], dtype="int64")
        nxt = fluid.layers.data("next", [1], dtype="int64")
        emb = fluid.layers.embedding(word, [vocab, 16], is_sparse=sparse)
        h = fluid.layers.fc(emb, 16, act="tanh")
        loss = fluid.layers.mean(loss_fn(h, nxt, vocab))
        fluid.optimizer.SGD(lr).minimize(loss)
    rng = np.random.RandomState(0)
    words = rng.randint(0, vocab, (64, 1)).astype("int64")
    feed = {"word": words, "next": (3 * words + 1) % vocab}
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    return [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].ravel()[0])
            for _ in range(steps)]


@pytest.mark.parametrize("sparse", [False, True])
def test_nce_trains_a_word_model(sparse):
    losses = _word_model(lambda h, y, v: fluid.layers.nce(h, y, v, num_neg_samples=5, seed=1,
                                                          is_sparse=sparse), sparse=sparse, lr=5.0)
    assert losses[-1] < 0.8 * losses[0], losses


def test_nce_sparse_gradients_train_as_dense():
    """is_sparse: the weight and bias gradients as SelectedRows give the same SGD steps."""
    vocab, n, d = 15, 8, 4
    rng = np.random.RandomState(18)
    feed = {"x": rng.randn(n, d).astype("float32"),
            "label": rng.randint(0, vocab, (n, 1)).astype("int64")}
    runs = []
    for sparse in (False, True):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.layers.data("x", [d])
            label = fluid.layers.data("label", [1], dtype="int64")
            loss = fluid.layers.mean(fluid.layers.nce(
                x, label, vocab, num_neg_samples=4, sampler="log_uniform", seed=2,
                is_sparse=sparse, param_attr=fluid.ParamAttr(
                    initializer=fluid.initializer.ConstantInitializer(0.1))))
            fluid.optimizer.SGD(1.0).minimize(loss)
        if sparse:
            op = _op(main, "nce_grad")
            assert op.attr("is_sparse")
        scope = core.Scope()
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup, scope=scope)
        losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].ravel()[0])
                  for _ in range(8)]
        w = np.array(scope.find_var("nce_0.w_0").get_tensor())
        runs.append((losses, w))
    np.testing.assert_allclose(runs[0][0], runs[1][0], rtol=1e-5)
    np.testing.assert_allclose(runs[0][1], runs[1][1], rtol=1e-5, atol=1e-7)
    assert runs[1][0][-1] < runs[1][0][0]


# ---------------------------------------------------------------------------------------------
# hsigmoid

def _hsigmoid_ref(x, w, b, paths, length):
    """paths: per row, a list of (node, bit)."""
    n = x.shape[0]
    pre = np.zeros((n, length))
    out = np.zeros((n, 1))
    for i in range(n):
        for j, (node, bit) in enumerate(paths[i]):
            pre[i, j] = np.clip(x[i] @ w[node] + (b[node, 0] if b is not None else 0.0), -40, 40)
            out[i, 0] -= bit * pre[i, j]
    soft = np.log1p(np.exp(pre))
    return out + soft.sum(1, keepdims=True), soft


def _default_paths(labels, num_classes):
    paths = []
    for c in labels.ravel():
        code = int(c) + num_classes
        length = code.bit_length() - 1
        paths.append([((code >> (j + 1)) - 1, (code >> j) & 1) for j in range(length)])
    return paths


def test_hsigmoid_default_tree_matches_numpy_and_gradient():
    rng = np.random.RandomState(4)
    n, d, classes = 5, 3, 6
    x = rng.randn(n, d)
    labels = np.array([[0], [5], [3], [2], [4]], "int64")
    w = rng.randn(classes - 1, d) * 0.5
    b = rng.randn(classes - 1, 1) * 0.1
    ot = OpTest(lambda x, label: fluid.layers.hsigmoid(x, label, classes),
                {"x": x, "label": labels}, params={"w_0": w, "b_0": b})
    length = (classes - 1).bit_length()
    out, pre = _hsigmoid_ref(x, w, b, _default_paths(labels, classes), length)
    ot.check_forward(out, rtol=1e-10)
    (got_pre,) = ot._run([_op(ot.main, "hierarchical_sigmoid").output("PreOut")[0]])
    np.testing.assert_allclose(got_pre, pre, rtol=1e-10)
    ot.check_grad(rtol=1e-6, atol=1e-8)


def test_hsigmoid_default_tree_is_a_distribution():
    # sum over classes of exp(-loss) is 1 (up to the log 2 per unused position of PreOut).
    rng = np.random.RandomState(5)
    classes, d = 7, 4
    x = np.repeat(rng.randn(1, d), classes, axis=0)
    labels = np.arange(classes, dtype="int64").reshape(-1, 1)
    ot = OpTest(lambda x, label: fluid.layers.hsigmoid(x, label, classes),
                {"x": x, "label": labels})
    (out,) = ot.forward()
    length = (classes - 1).bit_length()
    pad = np.array([length - len(p) for p in _default_paths(labels, classes)])
    np.testing.assert_allclose(np.exp(-(out.ravel() - pad * np.log(2.0))).sum(), 1.0, rtol=1e-5)


@pytest.mark.parametrize("sparse", [False, True])
def test_hsigmoid_custom_tree_matches_numpy_and_gradient(sparse):
    rng = np.random.RandomState(6)
    n, d, nodes = 4, 3, 5
    x = rng.randn(n, d)
    table = np.array([[0, 1, 3, -1], [0, 2, -1, -1], [4, 1, 2, 3], [0, -1, -1, -1]], "int64")
    code = np.array([[1, 0, 1, 0], [0, 1, 0, 0], [1, 1, 0, 1], [1, 0, 0, 0]], "int64")
    w = rng.randn(nodes, d) * 0.5
    b = rng.randn(nodes, 1) * 0.1
    ot = OpTest(lambda x, label, table, code: fluid.layers.hsigmoid(
        x, label, nodes, path_table=table, path_code=code, is_custom=True, is_sparse=sparse),
        {"x": x, "label": np.zeros((n, 1), "int64"), "table": table, "code": code},
        params={"w_0": w, "b_0": b})
    paths = [[(t, c) for t, c in zip(tr, cr) if t >= 0] for tr, cr in zip(table, code)]
    for i in range(n):  # a path ends at its first negative id
        k = list(table[i]).index(-1) if -1 in table[i] else 4
        paths[i] = paths[i][:k]
    out, _ = _hsigmoid_ref(x, w, b, paths, 4)
    ot.check_forward(out, rtol=1e-10)
    if not sparse:
        ot.check_grad(rtol=1e-6, atol=1e-8)
    else:
        # The sparse weight gradient is checked through training; x's gradient is dense.
        (dx,) = ot._run(["x@GRAD"])
        assert dx.shape == x.shape


def test_hsigmoid_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        x = fluid.layers.data("x", [4])
        label = fluid.layers.data("label", [1], dtype="int64")
        table = fluid.layers.data("table", [3], dtype="int64")
        with pytest.raises(ValueError, match="hsigmoid: num_classes must be >= 2"):
            fluid.layers.hsigmoid(x, label, 1)
        with pytest.raises(ValueError, match="hsigmoid: path_table and path_code are for a"):
            fluid.layers.hsigmoid(x, label, 5, path_table=table)
        with pytest.raises(ValueError, match="hsigmoid: path_code must be given"):
            fluid.layers.hsigmoid(x, label, 5, path_table=table, is_custom=True)
        with pytest.raises(ValueError, match="hsigmoid: path_table must be given"):
            fluid.layers.hsigmoid(x, label, 5, path_code=table, is_custom=True)
        with pytest.raises(TypeError, match="hsigmoid: label must be int64"):
            fluid.layers.hsigmoid(x, x, 5)


def test_hsigmoid_label_out_of_range_names_it():
    ot = OpTest(lambda x, label: fluid.layers.hsigmoid(x, label, 4),
                {"x": np.ones((2, 3)), "label": np.array([[1], [4]], "int64")})
    with pytest.raises(Exception, match="label 4 of row 1 is out of range"):
        ot.forward()


def test_hsigmoid_trains_a_word_model():
    losses = _word_model(lambda h, y, v: fluid.layers.hsigmoid(h, y, v))
    assert losses[-1] < 0.8 * losses[0], losses


def test_hsigmoid_sparse_custom_tree_trains_as_dense():
    """A custom tree equal to the default one: the sparse and dense weight gradients give the
    same SGD steps, and the loss falls."""
    vocab, n, d = 12, 16, 4
    rng = np.random.RandomState(7)
    labels = rng.randint(0, vocab, (n, 1)).astype("int64")
    length = (vocab - 1).bit_length()
    table = -np.ones((n, length), "int64")
    code = np.zeros((n, length), "int64")
    for i, path in enumerate(_default_paths(labels, vocab)):
        for j, (node, bit) in enumerate(path):
            table[i, j], code[i, j] = node, bit
    feed = {"x": rng.randn(n, d).astype("float32"), "label": labels, "table": table,
            "code": code}
    runs = []
    for sparse in (False, True):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.layers.data("x", [d])
            label = fluid.layers.data("label", [1], dtype="int64")
            t = fluid.layers.data("table", [length], dtype="int64")
            c = fluid.layers.data("code", [length], dtype="int64")
            h = fluid.layers.fc(x, 8, act="tanh", param_attr=fluid.ParamAttr(
                initializer=fluid.initializer.ConstantInitializer(0.1)))
            loss = fluid.layers.mean(fluid.layers.hsigmoid(
                h, label, vocab - 1, path_table=t, path_code=c, is_custom=True,
                is_sparse=sparse, param_attr=fluid.ParamAttr(
                    initializer=fluid.initializer.ConstantInitializer(0.05))))
            fluid.optimizer.SGD(0.5).minimize(loss)
        scope = core.Scope()
        exe = fluid.Executor(fluid.CPUPlace())
        exe.run(startup, scope=scope)
        runs.append([float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].ravel()[0])
                     for _ in range(10)])
    np.testing.assert_allclose(runs[0], runs[1], rtol=1e-5)
    assert runs[1][-1] < 0.9 * runs[1][0], runs[1]


# ---------------------------------------------------------------------------------------------
# sampled_softmax_with_cross_entropy

def _sampled_softmax_ref(logits, labels, samples, probs, remove_hits):
    n, t = labels.shape
    sl = np.take_along_axis(logits, samples, axis=1) - np.log(probs)
    if remove_hits:
        for i in range(n):
            for j in range(t, samples.shape[1]):
                if samples[i, j] in labels[i]:
                    sl[i, j] -= 1e20
    sl = sl - sl.max(1, keepdims=True)
    logp = sl - np.log(np.exp(sl).sum(1, keepdims=True))
    return -logp[:, :t].sum(1, keepdims=True) / t


@pytest.mark.parametrize("num_true", [1, 2])
def test_sampled_softmax_customized_samples_matches_numpy_and_gradient(num_true):
    rng = np.random.RandomState(8)
    n, k, s = 4, 9, 3
    logits = rng.randn(n, k)
    labels = np.stack([rng.choice(k, num_true, replace=False) for _ in range(n)]).astype("int64")
    negatives = np.array([1, 4, 7])
    samples = np.concatenate([labels, np.tile(negatives, (n, 1))], 1).astype("int64")
    probs = rng.rand(n, num_true + s) * 0.5 + 0.1
    ot = OpTest(lambda logits, label, samples, probs:
                fluid.layers.sampled_softmax_with_cross_entropy(
                    logits, label, s, num_true=num_true, use_customized_samples=True,
                    customized_samples=samples, customized_probabilities=probs),
                {"logits": logits, "label": labels, "samples": samples, "probs": probs},
                no_grad=["probs"])
    ot.check_forward(_sampled_softmax_ref(logits, labels, samples, probs, True), rtol=1e-10)
    ot.check_grad(rtol=1e-6, atol=1e-8)


def test_sampled_softmax_sampling_matches_numpy_and_gradient():
    rng = np.random.RandomState(9)
    n, k, s = 5, 20, 6
    logits = rng.randn(n, k)
    labels = rng.randint(0, k, (n, 1)).astype("int64")
    labels[0, 0] = 0  # class 0 is the likeliest sample: an accidental hit is likely
    ot = OpTest(lambda logits, label: fluid.layers.sampled_softmax_with_cross_entropy(
        logits, label, s, seed=13), {"logits": logits, "label": labels})
    op = _op(ot.main, "sample_logits")
    loss, samples, probs = ot._run([ot.outs[0], op.output("Samples")[0],
                                    op.output("Probabilities")[0]])
    loss2, samples2 = ot._run([ot.outs[0], op.output("Samples")[0]])
    np.testing.assert_array_equal(samples, samples2)
    np.testing.assert_array_equal(samples[:, :1], labels)
    neg = samples[:, 1:]
    assert (neg == neg[0]).all() and len(set(neg[0])) == s  # shared by the rows, distinct
    assert neg.min() >= 0 and neg.max() < k - 1
    np.testing.assert_allclose(loss, _sampled_softmax_ref(logits, labels, samples, probs, True),
                               rtol=1e-10)
    # Q: log-uniform over [0, k - 1), adjusted for the draws made (at least s).
    q = np.log((samples + 2.0) / (samples + 1.0)) / np.log(k)
    assert any(np.allclose(probs, q * s if t == s else -np.expm1(t * np.log1p(-q)), rtol=1e-9)
               for t in range(s, 1000))
    ot.check_grad(rtol=1e-6, atol=1e-8)


def test_sampled_softmax_without_removing_hits():
    logits = np.random.RandomState(10).randn(2, 5)
    labels = np.array([[1], [2]], "int64")
    samples = np.array([[1, 1, 3], [2, 0, 2]], "int64")
    probs = np.full((2, 3), 0.3)
    for remove in (True, False):
        ot = OpTest(lambda logits, label, samples, probs:
                    fluid.layers.sampled_softmax_with_cross_entropy(
                        logits, label, 2, remove_accidental_hits=remove,
                        use_customized_samples=True, customized_samples=samples,
                        customized_probabilities=probs),
                    {"logits": logits, "label": labels, "samples": samples, "probs": probs},
                    no_grad=["probs"])
        ot.check_forward(_sampled_softmax_ref(logits, labels, samples, probs, remove),
                         rtol=1e-10)
        ot.check_grad(rtol=1e-6, atol=1e-8)


def test_sampled_softmax_errors():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        logits = fluid.layers.data("logits", [10])
        label = fluid.layers.data("label", [1], dtype="int64")
        with pytest.raises(ValueError, match="num_samples \\(10\\) must be at most"):
            fluid.layers.sampled_softmax_with_cross_entropy(logits, label, 10)
        with pytest.raises(ValueError, match="num_true \\(2\\) must be label's second dim"):
            fluid.layers.sampled_softmax_with_cross_entropy(logits, label, 3, num_true=2)
        with pytest.raises(ValueError, match="use_customized_samples needs"):
            fluid.layers.sampled_softmax_with_cross_entropy(logits, label, 3,
                                                            use_customized_samples=True)
        with pytest.raises(TypeError, match="label must be int64"):
            fluid.layers.sampled_softmax_with_cross_entropy(logits, logits, 3)


def test_sampled_softmax_trains_a_word_model():
    def loss_fn(h, y, vocab):
        logits = fluid.layers.fc(h, vocab)
        return fluid.layers.sampled_softmax_with_cross_entropy(logits, y, 10, seed=4)
    losses = _word_model(loss_fn)
    assert losses[-1] < 0.8 * losses[0], losses


# ---------------------------------------------------------------------------------------------
# auc

def test_auc_layer_matches_metrics_auc_and_slides():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        pred = fluid.layers.data("pred", [2], dtype="float64")
        label = fluid.layers.data("label", [1], dtype="int64")
        auc_out, batch_auc, stats = fluid.layers.auc(pred, label, num_thresholds=200,
                                                     slide_steps=2)
    assert all(v.persistable for v in stats)
    assert auc_out.shape == (1,) or list(auc_out.shape) == [1]
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    rng = np.random.RandomState(11)
    metric = fluid.metrics.Auc("auc", num_thresholds=200)
    batches = []
    for step in range(4):
        p1 = rng.rand(30)
        lab = (rng.rand(30) < p1).astype("int64").reshape(-1, 1)
        pred_v = np.stack([1 - p1, p1], 1)
        batches.append((pred_v, lab))
        a, b = exe.run(main, feed={"pred": pred_v, "label": lab}, fetch_list=[auc_out, batch_auc],
                       scope=scope)
        metric.update(pred_v, lab)
        np.testing.assert_allclose(a, [metric.eval()], rtol=1e-12)
        window = fluid.metrics.Auc("w", num_thresholds=200)
        for pv, lv in batches[-2:]:
            window.update(pv, lv)
        np.testing.assert_allclose(b, [window.eval()], rtol=1e-12)
    # The global stats are the metric's bucket counts.
    stat_pos = np.array(scope.find_var(stats[2].name).get_tensor())
    np.testing.assert_array_equal(stat_pos.ravel(), metric._stat_pos)


def test_auc_exact_on_separable_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        pred = fluid.layers.data("pred", [1])
        label = fluid.layers.data("label", [1], dtype="int64")
        auc_out, batch_auc, _ = fluid.layers.auc(pred, label, slide_steps=0)
        with pytest.raises(NotImplementedError, match="auc: only curve='ROC'"):
            fluid.layers.auc(pred, label, curve="PR")
        with pytest.raises(TypeError, match="auc: label must be int64"):
            fluid.layers.auc(pred, pred)
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    feed = {"pred": np.array([[0.1], [0.2], [0.8], [0.9]], "float32"),
            "label": np.array([[0], [0], [1], [1]], "int64")}
    a, b = exe.run(main, feed=feed, fetch_list=[auc_out, batch_auc], scope=scope)
    assert a[0] == 1.0 and b[0] == 1.0
    feed["pred"] = np.array([[0.1], [1.5], [0.8], [0.9]], "float32")
    with pytest.raises(Exception, match="prediction 1.5 of row 1 is not a probability"):
        exe.run(main, feed=feed, fetch_list=[auc_out], scope=scope)


# ---------------------------------------------------------------------------------------------
# data_norm

def test_data_norm_matches_numpy_and_gradients():
    rng = np.random.RandomState(12)
    n, c = 5, 3
    x = rng.randn(n, c) * 2 + 1
    size = rng.rand(c) * 10 + 5
    total = rng.randn(c) * 3
    sq = rng.rand(c) * 20 + 5
    ot = OpTest(lambda x: fluid.layers.data_norm(x, epsilon=1e-4), {"x": x},
                params={"batch_size": size, "batch_sum": total, "batch_square_sum": sq})
    means, scales = total / size, np.sqrt(size / sq)
    ot.check_forward((x - means) * scales, rtol=1e-12)
    # The statistics' "gradients" are the batch's statistics, as Fluid's.
    names = [p.name for p in ot.main.global_block().all_parameters()]
    grads = dict(zip(names, ot._run([nm + "@GRAD" for nm in names])))
    g = {nm.split(".")[-1]: v for nm, v in grads.items()}
    np.testing.assert_allclose(g["batch_size"], np.full(c, n))
    np.testing.assert_allclose(g["batch_sum"], x.sum(0), rtol=1e-12)
    eps = float(np.float32(1e-4))  # a float32 attribute, as in Fluid
    np.testing.assert_allclose(g["batch_square_sum"], ((x - means) ** 2).sum(0) + n * eps,
                               rtol=1e-12)
    # X's gradient by finite differences (the statistics are not X's functions).
    ot.params = {}
    ot.param_names = {}
    ot.check_grad()


def test_data_norm_defaults_names_and_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3])
        fluid.layers.data_norm(x, name="dn", param_attr={"batch_size": 100.0, "batch_sum": 50.0,
                                                         "batch_square": 400.0})
        with pytest.raises(ValueError, match="data_norm: data_layout"):
            fluid.layers.data_norm(x, data_layout="NDHW")
        with pytest.raises(NotImplementedError, match="data_norm: slot_dim"):
            fluid.layers.data_norm(x, slot_dim=2)
        with pytest.raises(ValueError, match="data_norm: input must be 2-D"):
            fluid.layers.data_norm(fluid.layers.data("img", [1, 2, 2]))
    names = sorted(p.name for p in main.global_block().all_parameters())
    assert names == ["dn.batch_size", "dn.batch_square_sum", "dn.batch_sum"]
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    (y,) = exe.run(main, feed={"x": np.full((2, 3), 0.5, "float32")},
                   fetch_list=[main.global_block().ops[-1].output("Y")[0]], scope=scope)
    np.testing.assert_allclose(y, np.zeros((2, 3)), atol=1e-7)  # mean 0.5, scale 0.5


def test_data_norm_trains():
    """The statistics' gradients are Fluid's batch statistics, meant for a summary update on
    parameter servers, not for SGD: the fc layers around data_norm train through its input
    gradient while the statistics stay as initialized."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        y = fluid.layers.data("y", [1])
        h = fluid.layers.fc(x, 8)
        h = fluid.layers.data_norm(h, param_attr={"batch_size": 100.0, "batch_square": 400.0})
        pred = fluid.layers.fc(h, 1)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        fc_params = [p.name for p in main.global_block().all_parameters()
                     if not p.name.startswith("data_norm")]
        fluid.optimizer.SGD(0.05).minimize(loss, parameter_list=fc_params)
    rng = np.random.RandomState(13)
    xs = (rng.randn(32, 4) * 3 + 2).astype("float32")
    feed = {"x": xs, "y": (xs @ np.array([[0.5], [-1.0], [0.3], [0.2]])).astype("float32")}
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].ravel()[0])
              for _ in range(20)]
    assert losses[-1] < 0.5 * losses[0], losses


# ---------------------------------------------------------------------------------------------
# spectral_norm

def _spectral_ref(w, u, v, dim, iters, eps):
    mat = np.moveaxis(w, dim, 0).reshape(w.shape[dim], -1)
    for _ in range(iters):
        v = mat.T @ u
        v = v / (np.linalg.norm(v) + eps)
        u = mat @ v
        u = u / (np.linalg.norm(u) + eps)
    return w / (u @ mat @ v)


@pytest.mark.parametrize("shape,dim", [((4, 3), 0), ((3, 4, 2), 1), ((2, 3, 2, 2), 0)])
def test_spectral_norm_matches_numpy(shape, dim):
    rng = np.random.RandomState(14)
    w = rng.randn(*shape)
    h = shape[dim]
    u, v = rng.randn(h), rng.randn(w.size // h)
    ot = OpTest(lambda w: fluid.layers.spectral_norm(w, dim=dim, power_iters=3, eps=1e-12),
                {"w": w}, params={"u_0": u, "v_0": v})
    ot.check_forward(_spectral_ref(w, u, v, dim, 3, 1e-12), rtol=1e-10)
    # Many iterations reach the largest singular value.
    ot50 = OpTest(lambda w: fluid.layers.spectral_norm(w, dim=dim, power_iters=50),
                  {"w": w}, params={"u_0": u, "v_0": v})
    mat = np.moveaxis(w, dim, 0).reshape(h, -1)
    np.testing.assert_allclose(ot50.forward()[0], w / np.linalg.svd(mat, compute_uv=False)[0],
                               rtol=1e-8)


@pytest.mark.parametrize("shape,dim", [((4, 3), 0), ((3, 4, 2), 1)])
def test_spectral_norm_gradient(shape, dim):
    # With power_iters = 0, u and v do not depend on the weight: the gradient Fluid defines
    # (u and v held fixed) is then the exact one.
    rng = np.random.RandomState(15)
    w = rng.randn(*shape)
    h = shape[dim]
    ot = OpTest(lambda w: fluid.layers.spectral_norm(w, dim=dim, power_iters=0),
                {"w": w}, params={"u_0": rng.randn(h), "v_0": rng.randn(w.size // h)})
    ot.params, ot.param_names = {}, {}  # u and v are not trained
    ot.check_grad(rtol=1e-6, atol=1e-8)


def test_spectral_norm_errors_and_training():
    with fluid.program_guard(fluid.Program(), fluid.Program()):
        w = fluid.layers.create_parameter([4, 3], "float32")
        with pytest.raises(ValueError, match="spectral_norm: dim must be 0 or 1"):
            fluid.layers.spectral_norm(w, dim=2)
        with pytest.raises(ValueError, match="spectral_norm: power_iters"):
            fluid.layers.spectral_norm(w, power_iters=-1)
        with pytest.raises(ValueError, match="spectral_norm: weight must have rank 2 to 5"):
            fluid.layers.spectral_norm(fluid.layers.create_parameter([4], "float32"))
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [4])
        y = fluid.layers.data("y", [1])
        w = fluid.layers.create_parameter([4, 1], "float32", name="sn_w")
        pred = fluid.layers.scale(fluid.layers.matmul(x, fluid.layers.spectral_norm(w)), 2.0)
        loss = fluid.layers.mean(fluid.layers.square_error_cost(pred, y))
        _, params_grads = fluid.optimizer.SGD(0.1).minimize(loss)
    assert [p.name for p, _ in params_grads] == ["sn_w"]  # u and v are not trained
    rng = np.random.RandomState(16)
    xs = rng.randn(32, 4).astype("float32")
    feed = {"x": xs, "y": (xs @ np.array([[1.2], [-0.8], [0.4], [0.9]])).astype("float32")}
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0].ravel()[0])
              for _ in range(15)]
    assert losses[-1] < 0.8 * losses[0], losses


# ---------------------------------------------------------------------------------------------
# BuildStrategy.sync_batch_norm

def _bn_model():
    main, startup = fluid.Program(), fluid.Program()
    startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [2, 3, 3], dtype="float64")
        y = fluid.layers.data("y", [1], dtype="int64")
        c = fluid.layers.conv2d(x, num_filters=3, filter_size=3, padding=1)
        c = fluid.layers.batch_norm(c, act="relu", moving_mean_name="bn_mean",
                                    moving_variance_name="bn_var")
        h = fluid.layers.batch_norm(fluid.layers.fc(c, 5), act="tanh")
        logits = fluid.layers.fc(h, 3)
        loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.SGD(0.2).minimize(loss)
    return main, startup, loss


def _bn_state(main, scope):
    names = sorted(p.name for p in main.global_block().all_parameters()) + ["bn_mean", "bn_var"]
    return {n: np.array(scope.find_var(n).get_tensor()) for n in names}


@pytest.mark.parametrize("places,rows,scale,owner", [(2, 12, None, False), (3, 13, None, False),
                                                     (3, 12, 0, False), (2, 9, None, True)])
def test_sync_batch_norm_equals_one_batch_norm_over_the_global_batch(places, rows, scale, owner):
    rng = np.random.RandomState(17)
    data = [(rng.randn(rows, 2, 3, 3), rng.randint(0, 3, (rows, 1)).astype("int64"))
            for _ in range(4)]
    main, startup, loss = _bn_model()
    scope = core.Scope()
    exe = fluid.Executor(fluid.CPUPlace())
    exe.run(startup, scope=scope)
    init = _bn_state(main, scope)
    for x, y in data:
        exe.run(main, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
    expected = _bn_state(main, scope)

    results = {}
    for sync in (True, False):
        main, startup, loss = _bn_model()
        scope = core.Scope()
        exe.run(startup, scope=scope)
        for n, v in init.items():
            scope.find_var(n).get_tensor().set(v, fluid.CPUPlace())
        bs = fluid.BuildStrategy()
        bs.sync_batch_norm = sync
        bs.gradient_scale_strategy = scale
        if owner:
            bs.reduce_strategy = fluid.BuildStrategy.ReduceStrategy.Reduce
        compiled = fluid.CompiledProgram(main).with_data_parallel(
            loss_name=loss.name, build_strategy=bs, places=fluid.cpu_places(places))
        for x, y in data:
            exe.run(compiled, feed={"x": x, "y": y}, fetch_list=[loss], scope=scope)
        state = compiled._states[id(scope)]
        types = [state.mains[0].block(0).op(i).type()
                 for i in range(state.mains[0].block(0).op_size())]
        assert ("sync_batch_norm" in types) == sync and ("batch_norm" in types) != sync
        results[sync] = [_bn_state(main, s) for s in state.scopes]
    for rank in results[True]:
        for n, v in expected.items():
            np.testing.assert_allclose(rank[n], v, rtol=1e-10, atol=1e-12, err_msg=n)
    # Without synchronization each place normalizes with its own batch's statistics.
    assert not np.allclose(results[False][0]["bn_mean"], expected["bn_mean"], rtol=1e-6)


def test_names_are_layers_and_bad_paths_are_named():
    for name in ["nce", "hsigmoid", "sampled_softmax_with_cross_entropy", "auc", "data_norm",
                 "spectral_norm"]:
        assert name in fluid.layers.__all__ and callable(getattr(fluid.layers, name))
    table = np.array([[0, 7, -1]], "int64")
    ot = OpTest(lambda x, label, table, code: fluid.layers.hsigmoid(
        x, label, 4, path_table=table, path_code=code, is_custom=True),
        {"x": np.ones((1, 2)), "label": np.zeros((1, 1), "int64"), "table": table,
         "code": np.zeros((1, 3), "int64")})
    with pytest.raises(Exception, match=r"PathTable\[0, 1\] = 7 is out of range \[0, 4\)"):
        ot.forward()
    ot = OpTest(lambda x, label: fluid.layers.nce(x, label, 5, seed=1),
                {"x": np.ones((2, 3)), "label": np.array([[1], [5]], "int64")})
    with pytest.raises(Exception, match="label 5 of row 1 is out of range"):
        ot.forward()
