"""fluid.metrics against direct NumPy counts; gradient clipping by value and by norm and L1
decay against NumPy over one SGD step."""
import numpy as np
import pytest

import loom as fluid


def test_precision_recall_accuracy_composite():
    preds = np.array([0.9, 0.2, 0.7, 0.4, 0.8])
    labels = np.array([1, 0, 0, 1, 1])
    p, r = fluid.metrics.Precision(), fluid.metrics.Recall()
    comp = fluid.metrics.CompositeMetric()
    comp.add_metric(p)
    comp.add_metric(r)
    comp.update(preds[:3], labels[:3])
    comp.update(preds[3:], labels[3:])
    assert comp.eval() == [2 / 3, 2 / 3]  # tp 2 (0.9, 0.8), fp 1 (0.7), fn 1 (0.4)
    acc = fluid.metrics.Accuracy()
    acc.update(value=np.array([0.5]), weight=4)
    acc.update(value=np.array([1.0]), weight=12)
    assert acc.eval() == pytest.approx((0.5 * 4 + 12) / 16)
    acc.reset()
    with pytest.raises(ValueError, match="no batch"):
        acc.eval()


def test_auc_and_edit_distance():
    rng = np.random.RandomState(0)
    labels = rng.randint(0, 2, 400)
    scores = np.clip(labels * 0.3 + rng.rand(400) * 0.7, 0, 1)
    auc = fluid.metrics.Auc()
    auc.update(np.stack([1 - scores, scores], 1), labels)
    pos, neg = scores[labels == 1], scores[labels == 0]
    exact = ((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum()) \
        / (len(pos) * len(neg))
    assert auc.eval() == pytest.approx(exact, abs=2e-3)
    ed = fluid.metrics.EditDistance()
    ed.update(np.array([0, 2, 1]), 3)
    assert ed.eval() == (1.0, 2 / 3)


def one_sgd_step(**opt_args):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 3])
        y = fluid.layers.fc(x, 2, bias_attr=False, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(0.5)))
        loss = fluid.layers.reduce_sum(y)
        fluid.optimizer.SGD(0.1, **opt_args).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    xs = np.array([[1.0, -2.0, 3.0], [2.0, 1.0, 1.0]], "float32")
    with fluid.scope_guard(scope):
        exe.run(startup)
        exe.run(main, feed={"x": xs})
        w = np.array(scope.find_var("w").get_tensor())
    grad = np.repeat(xs.sum(0)[:, None], 2, 1)  # d sum(x @ w) / dw
    return w, grad


def test_clip_by_value_by_norm_and_l1_decay():
    w, g = one_sgd_step(grad_clip=fluid.clip.GradientClipByValue(1.5, -0.5))
    np.testing.assert_allclose(w, 0.5 - 0.1 * np.clip(g, -0.5, 1.5), rtol=1e-6)
    w, g = one_sgd_step(grad_clip=fluid.clip.GradientClipByNorm(2.0))
    np.testing.assert_allclose(w, 0.5 - 0.1 * g * 2.0 / np.linalg.norm(g), rtol=1e-6)
    w, g = one_sgd_step(regularization=fluid.regularizer.L1Decay(0.3))
    np.testing.assert_allclose(w, 0.5 - 0.1 * (g + 0.3), rtol=1e-6)
    with pytest.raises(ValueError, match="min 2.0 exceeds max 1.0"):
        fluid.clip.GradientClipByValue(1.0, 2.0)


def test_truncated_normal_numpy_array_and_bilinear_initializers():
    main, startup = fluid.Program(), fluid.Program()
    arr = np.arange(6, dtype="float32").reshape(2, 3)
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        t = fluid.layers.create_parameter([200, 50], "float32", name="t", default_initializer=(
            fluid.initializer.TruncatedNormal(loc=1.0, scale=0.5, seed=4)))
        a = fluid.layers.create_parameter([2, 3], "float32", name="a", default_initializer=(
            fluid.initializer.NumpyArrayInitializer(arr)))
        i = fluid.layers.create_parameter([3], "int64", name="i", default_initializer=(
            fluid.initializer.NumpyArrayInitializer(np.array([7, -1, 2 ** 40]))))
        b = fluid.layers.create_parameter([1, 1, 4, 4], "float32", name="b",
                                          default_initializer=fluid.initializer.Bilinear())
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    with fluid.scope_guard(scope):
        exe.run(startup)
        tv, av, iv, bv = (np.array(scope.find_var(n).get_tensor()) for n in "taib")
    assert tv.min() >= 0.0 and tv.max() <= 2.0 and abs(tv.mean() - 1.0) < 0.02
    np.testing.assert_array_equal(av, arr)
    assert iv.tolist() == [7, -1, 2 ** 40]
    np.testing.assert_allclose(bv[0, 0, 0], [0.0625, 0.1875, 0.1875, 0.0625])
    with pytest.raises(ValueError, match="value is \\[2, 3\\]"):
        with fluid.program_guard(fluid.Program(), fluid.Program()):
            fluid.layers.create_parameter([3, 2], "float32", default_initializer=(
                fluid.initializer.NumpyArrayInitializer(arr)))
