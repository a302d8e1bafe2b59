"""Learning-rate schedules built from ops (op_role lrsched), so that a transpiler can move them:
the parameter-server transpiler runs them on the servers, once per step."""
import math

from .. import core
from ..framework import Variable, _op_role_guard, default_main_program
from .activation import ceil, cos, exp, floor, log, rsqrt
from .control_flow import greater_equal, increment, less_than
from .math import elementwise_add, elementwise_div, elementwise_min, elementwise_mul, scale
from .tensor import cast, create_global_var, fill_constant

__all__ = ["exponential_decay", "natural_exp_decay", "inverse_time_decay", "polynomial_decay",
           "piecewise_decay", "noam_decay", "cosine_decay", "linear_lr_warmup"]


def _step_counter(dtype="float32"):
    """A persistable counter that is 0 on the first step and grows by one each step (Fluid's
    autoincreased_step_counter(begin=0))."""
    name = "@LR_DECAY_COUNTER@"
    block = default_main_program().global_block()
    if block.has_var(name):  # one counter per program, advanced once per step
        return block.var(name)
    counter = create_global_var(shape=[1], value=-1.0, dtype=dtype, persistable=True,
                                name=name)
    increment(counter, 1.0)
    return counter


def _schedule(build):
    """Runs build() (which makes the schedule's ops and returns the rate) under the lrsched role
    of the default main program, and marks the result as a schedule (optimizers of float64
    programs cast it: loom/optimizer.py)."""
    program = default_main_program()
    with _op_role_guard(program, core.kOpRoleLRSched):
        lr = build()
    lr._lr_schedule = True
    return lr


def _check_positive(fn, **values):
    for name, v in values.items():
        if not isinstance(v, (int, float)) or v <= 0:
            raise ValueError("%s: %s must be a number > 0, got %r" % (fn, name, v))


def _const(value):
    return fill_constant([1], "float32", float(value))


def _indicator(cond):
    """1.0 where a comparison holds, else 0.0 (float32)."""
    return cast(cond, "float32")


def _ratio(step, decay_steps, staircase):
    """step / decay_steps, or its floor with staircase."""
    x = scale(step, scale=1.0 / float(decay_steps))
    return floor(x) if staircase else x


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * decay_rate ^ (step / decay_steps) (with staircase: the integer part of
    the exponent), the step counting from 0."""
    _check_positive("exponential_decay", decay_steps=decay_steps, decay_rate=decay_rate)

    def build():
        x = _ratio(_step_counter(), decay_steps, staircase)
        # decay_rate ** x = exp(x * ln(decay_rate)), then times the base rate.
        return scale(exp(scale(x, scale=math.log(decay_rate))), scale=float(learning_rate))
    return _schedule(build)


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * exp(-decay_rate * step / decay_steps) (staircase: floor of the ratio)."""
    _check_positive("natural_exp_decay", decay_steps=decay_steps)

    def build():
        x = _ratio(_step_counter(), decay_steps, staircase)
        return scale(exp(scale(x, scale=-float(decay_rate))), scale=float(learning_rate))
    return _schedule(build)


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate / (1 + decay_rate * step / decay_steps) (staircase: floor of the ratio)."""
    _check_positive("inverse_time_decay", decay_steps=decay_steps)

    def build():
        x = _ratio(_step_counter(), decay_steps, staircase)
        denom = scale(x, scale=float(decay_rate), bias=1.0)
        return elementwise_div(_const(learning_rate), denom)
    return _schedule(build)


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0,
                     cycle=False):
    """(learning_rate - end) * (1 - step / decay_steps) ^ power + end, with the step held at
    decay_steps; with cycle, decay_steps grows to the next multiple of itself past the step
    (Fluid's polynomial_decay)."""
    _check_positive("polynomial_decay", decay_steps=decay_steps)

    def build():
        step = _step_counter()
        if cycle:
            div = ceil(scale(step, scale=1.0 / float(decay_steps)))
            # The first step (0) divides by one period, not zero.
            zero = _indicator(less_than(step, _const(0.5)))
            div = elementwise_add(div, zero)
            steps = scale(div, scale=float(decay_steps))
            frac = elementwise_div(step, steps)
        else:
            held = elementwise_min(step, _const(decay_steps))
            frac = scale(held, scale=1.0 / float(decay_steps))
        base = scale(frac, scale=-1.0, bias=1.0)  # 1 - frac, in [0, 1]
        if power == 1.0:
            decayed = base
        else:
            # base ** power as exp(power * ln(base)); base = 0 gives exp(-inf) = 0.
            decayed = exp(scale(log(base), scale=float(power)))
        return scale(decayed, scale=float(learning_rate - end_learning_rate),
                     bias=float(end_learning_rate))
    return _schedule(build)


def piecewise_decay(boundaries, values):
    """values[i] while boundaries[i-1] <= step < boundaries[i] (values has one more entry than
    boundaries); each value exact, as a sum of 0/1 indicators times values."""
    if len(values) != len(boundaries) + 1:
        raise ValueError("piecewise_decay: %d values for %d boundaries (need one more value "
                         "than boundaries)" % (len(values), len(boundaries)))
    if list(boundaries) != sorted(boundaries):
        raise ValueError("piecewise_decay: boundaries %r are not increasing" % (boundaries,))

    def build():
        step = _step_counter()
        lr = None
        edges = [None] + list(boundaries) + [None]
        for i, v in enumerate(values):
            lo, hi = edges[i], edges[i + 1]
            parts = []
            if lo is not None:
                parts.append(_indicator(greater_equal(step, _const(lo))))
            if hi is not None:
                parts.append(_indicator(less_than(step, _const(hi))))
            ind = parts[0] if len(parts) == 1 else elementwise_mul(parts[0], parts[1])
            term = scale(ind, scale=float(v))
            lr = term if lr is None else elementwise_add(lr, term)
        return lr
    return _schedule(build)


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    """learning_rate * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), the step
    counting from 1 (the Transformer's schedule)."""
    _check_positive("noam_decay", d_model=d_model, warmup_steps=warmup_steps)

    def build():
        step = scale(_step_counter(), bias=1.0)
        a = rsqrt(step)
        b = scale(step, scale=float(warmup_steps) ** -1.5)
        return scale(elementwise_min(a, b), scale=float(learning_rate) * float(d_model) ** -0.5)
    return _schedule(build)


def cosine_decay(learning_rate, step_each_epoch, epochs):
    """learning_rate * 0.5 * (cos(epoch * pi / epochs) + 1), epoch = floor(step /
    step_each_epoch)."""
    _check_positive("cosine_decay", step_each_epoch=step_each_epoch, epochs=epochs)

    def build():
        epoch = floor(scale(_step_counter(), scale=1.0 / float(step_each_epoch)))
        c = cos(scale(epoch, scale=math.pi / float(epochs)))
        return scale(c, scale=0.5 * float(learning_rate), bias=0.5 * float(learning_rate))
    return _schedule(build)


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """start_lr + (end_lr - start_lr) * step / warmup_steps while step < warmup_steps, then
    learning_rate (a number or another schedule)."""
    _check_positive("linear_lr_warmup", warmup_steps=warmup_steps)
    if not isinstance(learning_rate, (int, float, Variable)):
        raise TypeError("linear_lr_warmup: learning_rate must be a number or a Variable, got %r"
                        % (learning_rate,))

    def build():
        step = _step_counter()
        warm = scale(step, scale=(float(end_lr) - float(start_lr)) / float(warmup_steps),
                     bias=float(start_lr))
        during = _indicator(less_than(step, _const(warmup_steps)))
        after = scale(during, scale=-1.0, bias=1.0)
        rest = learning_rate if isinstance(learning_rate, Variable) else _const(learning_rate)
        if isinstance(rest, Variable) and rest.dtype != during.dtype:
            rest = cast(rest, "float32")
        return elementwise_add(elementwise_mul(warm, during), elementwise_mul(rest, after))
    return _schedule(build)
