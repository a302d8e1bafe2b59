"""Fluid's learning-rate schedules: the rate each step equals the schedule's formula (the step
counting from 0, noam's from 1), computed by ops of role lrsched; and a schedule drives an
optimizer, in float32 and float64 programs."""
import math

import numpy as np
import pytest

import loom as fluid
from loom import core

STEPS = 12
L = fluid.layers


def rates(make):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        lr = make()
    exe, scope = fluid.Executor(fluid.CPUPlace()), core.Scope()
    out = []
    with fluid.scope_guard(scope):
        exe.run(startup)
        for _ in range(STEPS):
            out.append(float(exe.run(main, fetch_list=[lr])[0][0]))
    roles = {op.attr("op_role") for op in main.global_block().ops}
    assert roles == {core.kOpRoleLRSched}, roles
    return np.array(out)


def poly(step, lr, decay_steps, end, power, cycle):
    if cycle:
        div = math.ceil(step / decay_steps) or 1
        decay_steps = decay_steps * div
    else:
        step = min(step, decay_steps)
    return (lr - end) * (1 - step / decay_steps) ** power + end


def piecewise(step, bounds, values):
    for b, v in zip(bounds, values):
        if step < b:
            return v
    return values[-1]


CASES = {
    "exponential": (lambda: L.exponential_decay(0.1, 3, 0.5),
                    lambda s: 0.1 * 0.5 ** (s / 3)),
    "exponential_staircase": (lambda: L.exponential_decay(0.1, 3, 0.5, staircase=True),
                              lambda s: 0.1 * 0.5 ** (s // 3)),
    "natural_exp": (lambda: L.natural_exp_decay(0.1, 4, 0.3),
                    lambda s: 0.1 * math.exp(-0.3 * s / 4)),
    "natural_exp_staircase": (lambda: L.natural_exp_decay(0.1, 4, 0.3, staircase=True),
                              lambda s: 0.1 * math.exp(-0.3 * (s // 4))),
    "inverse_time": (lambda: L.inverse_time_decay(0.1, 2, 0.5),
                     lambda s: 0.1 / (1 + 0.5 * s / 2)),
    "inverse_time_staircase": (lambda: L.inverse_time_decay(0.1, 2, 0.5, staircase=True),
                               lambda s: 0.1 / (1 + 0.5 * (s // 2))),
    "polynomial": (lambda: L.polynomial_decay(0.1, 8, 0.01, power=2.0),
                   lambda s: poly(s, 0.1, 8, 0.01, 2.0, False)),
    "polynomial_linear": (lambda: L.polynomial_decay(0.1, 8, 0.01),
                          lambda s: poly(s, 0.1, 8, 0.01, 1.0, False)),
    "polynomial_cycle": (lambda: L.polynomial_decay(0.1, 5, 0.01, power=1.5, cycle=True),
                         lambda s: poly(s, 0.1, 5, 0.01, 1.5, True)),
    "piecewise": (lambda: L.piecewise_decay([3, 7], [0.1, 0.01, 0.001]),
                  lambda s: piecewise(s, [3, 7], [0.1, 0.01, 0.001])),
    "noam": (lambda: L.noam_decay(64, 4), lambda s: 64 ** -0.5 * min((s + 1) ** -0.5,
                                                                     (s + 1) * 4 ** -1.5)),
    "cosine": (lambda: L.cosine_decay(0.1, 3, 4),
               lambda s: 0.1 * 0.5 * (math.cos((s // 3) * math.pi / 4) + 1)),
    "linear_warmup": (lambda: L.linear_lr_warmup(0.1, 5, 0.0, 0.1),
                      lambda s: 0.1 * s / 5 if s < 5 else 0.1),
    "warmup_then_piecewise": (
        lambda: L.linear_lr_warmup(L.piecewise_decay([8], [0.1, 0.05]), 4, 0.02, 0.1),
        lambda s: 0.02 + 0.08 * s / 4 if s < 4 else piecewise(s, [8], [0.1, 0.05])),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_schedule_follows_its_formula(name):
    make, formula = CASES[name]
    got = rates(make)
    want = np.array([formula(s) for s in range(STEPS)])
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-9, err_msg=name)


def test_piecewise_values_are_exact():
    got = rates(lambda: L.piecewise_decay([2, 5], [0.1, 0.01, 0.001]))
    want = np.array([piecewise(s, [2, 5], [0.1, 0.01, 0.001]) for s in range(STEPS)],
                    dtype=np.float32)
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_bad_arguments_name_the_schedule():
    with pytest.raises(ValueError, match="piecewise_decay: 2 values for 2 boundaries"):
        L.piecewise_decay([1, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="cosine_decay: epochs"):
        L.cosine_decay(0.1, 10, 0)
    with pytest.raises(ValueError, match="noam_decay: warmup_steps"):
        L.noam_decay(512, -1)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_schedule_drives_sgd(dtype):
    """w -= lr_t * grad with lr_t the schedule's rate at step t."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [None, 2], dtype=dtype)
        y = fluid.layers.fc(x, 1, bias_attr=False, param_attr=fluid.ParamAttr(
            name="w", initializer=fluid.initializer.Constant(0.5)))
        loss = fluid.layers.mean(y)
        lr = L.piecewise_decay([2], [0.1, 0.01])
        fluid.optimizer.SGD(lr).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), core.Scope()
    xs = np.ones((4, 2), dtype)
    with fluid.scope_guard(scope):
        exe.run(startup)
        w = np.full((2, 1), 0.5)
        for step in range(4):
            exe.run(main, feed={"x": xs})
            w = w - (0.1 if step < 2 else 0.01) * np.ones((2, 1))  # d mean(x @ w) / dw = 1
            got = np.array(scope.find_var("w").get_tensor())
            np.testing.assert_allclose(got, w, rtol=1e-6)
