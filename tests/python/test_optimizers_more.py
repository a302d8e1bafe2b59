"""Fluid's other optimizers (Adagrad, DecayedAdagrad, RMSProp, Adamax, Adadelta, Lamb,
LarsMomentum, Ftrl) equal a NumPy re-implementation of their update rules over several steps,
in a float64 program (exact to rounding) and a float32 one."""
import numpy as np
import pytest

import loom as fluid
from loom import core

STEPS = 5


def run(opt, dtype):
    """Trains a linear model with opt; returns [(w, grad) before each step] and the final w."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3], dtype=dtype)
        y = fluid.layers.fc(x, 2, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Uniform(-0.5, 0.5, seed=3)), bias_attr=False)
        loss = fluid.layers.mean(fluid.layers.square(y - 0.3))
        opt.minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), core.Scope()
    rng = np.random.RandomState(0)
    history = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(STEPS):
            w = np.array(scope.find_var("w").get_tensor()).astype("float64")
            (g,) = exe.run(main, feed={"x": rng.randn(5, 3).astype(dtype)}, fetch_list=["w@GRAD"])
            history.append((w, g.astype("float64")))
        final = np.array(scope.find_var("w").get_tensor()).astype("float64")
    return history, final


def f32(v):
    """An op attribute's value: attributes are float32, as Fluid's."""
    return float(np.float32(v))


def adagrad(lr=0.1, eps=1e-6):
    eps = f32(eps)
    state = {"m": 0.0}

    def step(w, g):
        state["m"] = state["m"] + g * g
        return w - lr * g / (np.sqrt(state["m"]) + eps)
    return fluid.optimizer.Adagrad(lr, epsilon=eps), step


def decayed_adagrad(lr=0.1, decay=0.9, eps=1e-6):
    decay, eps = f32(decay), f32(eps)
    state = {"m": 0.0}

    def step(w, g):
        state["m"] = decay * state["m"] + (1 - decay) * g * g
        return w - lr * g / (np.sqrt(state["m"]) + eps)
    return fluid.optimizer.DecayedAdagrad(lr, decay=decay, epsilon=eps), step


def rmsprop(centered, lr=0.05, rho=0.9, eps=1e-6, mom=0.5):
    rho, eps, mom = f32(rho), f32(eps), f32(mom)
    state = {"ms": 0.0, "mg": 0.0, "v": 0.0}

    def step(w, g):
        state["ms"] = rho * state["ms"] + (1 - rho) * g * g
        if centered:
            state["mg"] = rho * state["mg"] + (1 - rho) * g
            denom = np.sqrt(state["ms"] - state["mg"] ** 2 + eps)
        else:
            denom = np.sqrt(state["ms"] + eps)
        state["v"] = mom * state["v"] + lr * g / denom
        return w - state["v"]
    return fluid.optimizer.RMSProp(lr, rho=rho, epsilon=eps, momentum=mom,
                                   centered=centered), step


def adamax(lr=0.05, b1=0.9, b2=0.99, eps=1e-8):
    b1, b2, eps = f32(b1), f32(b2), f32(eps)
    state = {"m": 0.0, "u": 0.0, "b1p": b1}

    def step(w, g):
        state["m"] = b1 * state["m"] + (1 - b1) * g
        state["u"] = np.maximum(b2 * state["u"] + eps, np.abs(g))
        out = w - lr / (1 - state["b1p"]) * state["m"] / state["u"]
        state["b1p"] *= b1
        return out
    return fluid.optimizer.Adamax(lr, beta1=b1, beta2=b2, epsilon=eps), step


def adadelta(rho=0.9, eps=1e-6):
    rho, eps = f32(rho), f32(eps)
    state = {"g2": 0.0, "u2": 0.0}

    def step(w, g):
        state["g2"] = rho * state["g2"] + (1 - rho) * g * g
        upd = -np.sqrt((state["u2"] + eps) / (state["g2"] + eps)) * g
        state["u2"] = rho * state["u2"] + (1 - rho) * upd * upd
        return w + upd
    return fluid.optimizer.Adadelta(1.0, epsilon=eps, rho=rho), step


def lamb(lr=0.05, wd=0.01, b1=0.9, b2=0.999, eps=1e-6):
    wd, b1, b2, eps = f32(wd), f32(b1), f32(b2), f32(eps)
    state = {"m": 0.0, "v": 0.0, "b1p": b1, "b2p": b2}

    def step(w, g):
        state["m"] = b1 * state["m"] + (1 - b1) * g
        state["v"] = b2 * state["v"] + (1 - b2) * g * g
        r = (state["m"] / (1 - state["b1p"])) / (np.sqrt(state["v"] / (1 - state["b2p"])) + eps)
        r = r + wd * w
        pn, rn = np.linalg.norm(w), np.linalg.norm(r)
        ratio = pn / rn if pn > 0 and rn > 0 else 1.0
        state["b1p"] *= b1
        state["b2p"] *= b2
        return w - lr * ratio * r
    return fluid.optimizer.Lamb(lr, lamb_weight_decay=wd, beta1=b1, beta2=b2,
                                epsilon=eps), step


def lars(lr=0.1, mu=0.9, coeff=0.01, wd=0.0005):
    mu, coeff, wd = f32(mu), f32(coeff), f32(wd)
    state = {"v": 0.0}

    def step(w, g):
        pn, gn = np.linalg.norm(w), np.linalg.norm(g)
        local = lr * coeff * pn / (gn + wd * pn) if pn > 0 and gn > 0 else lr
        state["v"] = mu * state["v"] + local * (g + wd * w)
        return w - state["v"]
    return fluid.optimizer.LarsMomentum(lr, mu, lars_coeff=coeff, lars_weight_decay=wd), step


def ftrl(lr_power, lr=0.1, l1=0.01, l2=0.02):
    lr_power, l1, l2 = f32(lr_power), f32(l1), f32(l2)
    state = {"sq": 0.0, "lin": 0.0}

    def step(w, g):
        sq = state["sq"] + g * g
        if lr_power == -0.5:
            state["lin"] = state["lin"] + g - (np.sqrt(sq) - np.sqrt(state["sq"])) / lr * w
            y = np.sqrt(sq) / lr + 2 * l2
        else:
            state["lin"] = state["lin"] + g - (sq ** -lr_power - np.power(
                state["sq"], -lr_power)) / lr * w
            y = sq ** -lr_power / lr + 2 * l2
        x = l1 * np.sign(state["lin"]) - state["lin"]
        state["sq"] = sq
        return np.where(np.abs(state["lin"]) > l1, x / y, 0.0)
    return fluid.optimizer.Ftrl(lr, l1=l1, l2=l2, lr_power=lr_power), step


CASES = {
    "adagrad": adagrad, "decayed_adagrad": decayed_adagrad,
    "rmsprop": lambda: rmsprop(False), "rmsprop_centered": lambda: rmsprop(True),
    "adamax": adamax, "adadelta": adadelta, "lamb": lamb, "lars_momentum": lars,
    "ftrl": lambda: ftrl(-0.5), "ftrl_power": lambda: ftrl(-0.6),
}


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_optimizer_matches_numpy(name, dtype):
    opt, step = CASES[name]()
    history, final = run(opt, dtype)
    tol = 1e-12 if dtype == "float64" else 2e-5
    for k, (w, g) in enumerate(history):
        want = step(w, g)
        got = history[k + 1][0] if k + 1 < len(history) else final
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol,
                                   err_msg="%s step %d" % (name, k))
    assert not np.allclose(final, history[0][0]), "the optimizer did not move the weights"


def test_aliases_are_fluids_names():
    o = fluid.optimizer
    for short in ("Adagrad", "DecayedAdagrad", "RMSProp", "Adamax", "Adadelta", "Lamb",
                  "LarsMomentum", "Ftrl"):
        assert getattr(o, short) is getattr(o, short + "Optimizer")


def test_update_ops_carry_roles():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.layers.data("x", [3])
        loss = fluid.layers.mean(fluid.layers.fc(x, 2, bias_attr=False))
        fluid.optimizer.RMSProp(0.1, centered=True).minimize(loss)
    ops = [op for op in main.global_block().ops if op.type == "rmsprop"]
    assert len(ops) == 1 and ops[0].attr("op_role") == core.kOpRoleOptimize


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_lazy_adam_moves_only_the_looked_up_rows(dtype):
    """lazy_mode (Fluid's lazy Adam over a sparse gradient): embedding rows no step looked up
    keep their values and moments; without it Adam's momentum moves every row it ever saw."""
    rows, width = 10, 3
    table = np.random.RandomState(0).randn(rows, width).astype(dtype)
    steps = [np.array([[1], [4]], "int64"), np.array([[2], [4]], "int64")]

    def train(lazy):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            ids = fluid.data("ids", [None, 1], dtype="int64")
            emb = fluid.layers.embedding(ids, [rows, width], is_sparse=True, dtype=dtype,
                                         param_attr=fluid.ParamAttr(
                                             name="t", initializer=fluid.initializer.
                                             NumpyArrayInitializer(table)))
            loss = fluid.layers.reduce_sum(fluid.layers.square(emb))
            fluid.optimizer.Adam(0.1, lazy_mode=lazy).minimize(loss)
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            for feed in steps:
                exe.run(main, feed={"ids": feed})
            return np.array(fluid.global_scope().find_var("t").get_tensor())

    start = table.astype(np.float32).astype(dtype)
    lazy, eager = train(True), train(False)
    # row 1 was looked up at step 1 only: eager Adam moves it again at step 2, lazy does not
    for r in (0, 3, 5, 9):
        np.testing.assert_array_equal(lazy[r], start[r])
    assert not np.allclose(lazy[[1, 2, 4]], start[[1, 2, 4]])
    np.testing.assert_array_equal(lazy[4], eager[4])  # looked up at both steps: same update
    assert not np.array_equal(lazy[1], eager[1])
