"""Optimizer steps equal a NumPy re-implementation over several steps."""
import numpy as np
import pytest

import loom as fluid
from loom import core


def linear_model(opt):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3])
        y = fluid.layers.fc(x, 2, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Uniform(-0.5, 0.5, seed=3)), bias_attr=False)
        loss = fluid.layers.mean(fluid.layers.square(y))
        opt.minimize(loss)
    return main, startup, loss


def run_steps(opt, steps=4):
    main, startup, loss = linear_model(opt)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = core.Scope()
    x = np.random.RandomState(0).randn(5, 3).astype("float32")
    history = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = np.array(scope.find_var("w").get_tensor()).astype("float64")
        for _ in range(steps):
            (g,) = exe.run(main, feed={"x": x}, fetch_list=["w@GRAD"])
            history.append((w.copy(), g.astype("float64")))
            w = np.array(scope.find_var("w").get_tensor()).astype("float64")
    return history, w


def grad_of(w, x):
    y = x @ w
    return 2 * x.T @ y / y.size


def test_sgd_matches_numpy():
    history, final = run_steps(fluid.optimizer.SGD(0.1))
    for (w, g), (w_next, _) in zip(history, history[1:] + [(final, None)]):
        np.testing.assert_allclose(w_next, w - 0.1 * g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("nesterov", [False, True])
def test_momentum_matches_numpy(nesterov):
    history, final = run_steps(fluid.optimizer.Momentum(0.1, 0.9, use_nesterov=nesterov))
    v = np.zeros_like(history[0][0])
    ws = [h[0] for h in history[1:]] + [final]
    for (w, g), w_next in zip(history, ws):
        v = 0.9 * v + g
        want = w - 0.1 * (g + 0.9 * v if nesterov else v)
        np.testing.assert_allclose(w_next, want, rtol=1e-5, atol=1e-6)


def test_adam_matches_numpy():
    history, final = run_steps(fluid.optimizer.Adam(0.05), steps=5)
    m = np.zeros_like(history[0][0])
    v = np.zeros_like(m)
    b1, b2, eps = 0.9, 0.999, 1e-8
    ws = [h[0] for h in history[1:]] + [final]
    for t, ((w, g), w_next) in enumerate(zip(history, ws), start=1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        lr_t = 0.05 * np.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        want = w - lr_t * m / (np.sqrt(v) + eps * np.sqrt(1 - b2 ** t))
        np.testing.assert_allclose(w_next, want, rtol=1e-4, atol=1e-6)


def test_optimizer_ops_carry_roles():
    main, _, _ = linear_model(fluid.optimizer.Adam(0.01))
    adam = [op for op in main.global_block().ops if op.type == "adam"]
    assert len(adam) == 1
    assert adam[0].attr("op_role") == core.kOpRoleOptimize
    assert adam[0].attr("op_role_var") == ["w", "w@GRAD"]


def test_bad_learning_rate():
    with pytest.raises(ValueError, match="learning_rate"):
        fluid.optimizer.SGD(-1.0)


def test_gradient_clip_by_global_norm_matches_numpy():
    clip = fluid.clip.GradientClipByGlobalNorm(0.05)
    history, final = run_steps(fluid.optimizer.SGD(0.1, grad_clip=clip), steps=2)
    (w, g), (w_next, _) = history[0], history[1]
    # w@GRAD fetched is the clipped gradient; check it against the unclipped one from numpy.
    x = np.random.RandomState(0).randn(5, 3)
    raw = grad_of(w, x)
    scale = 0.05 / max(np.linalg.norm(raw), 0.05)
    np.testing.assert_allclose(g, raw * scale, rtol=1e-4, atol=1e-7)
    np.testing.assert_allclose(w_next, w - 0.1 * g, rtol=1e-5, atol=1e-7)
    assert np.linalg.norm(g) <= 0.05 + 1e-6
