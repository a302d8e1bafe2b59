"""Learning-rate schedules built from ops (op_role lrsched), so that a transpiler can move them:
the parameter-server transpiler runs them on the servers, once per step."""
import math

from . import core
from .framework import _op_role_guard, default_main_program


def _step_counter(dtype="float32"):
    """A persistable counter that is 0 on the first step and grows by one each step (Fluid's
    autoincreased_step_counter(begin=0))."""
    from . import layers
    name = "@LR_DECAY_COUNTER@"
    block = default_main_program().global_block()
    if block.has_var(name):  # one counter per program, advanced once per step
        return block.var(name)
    counter = layers.create_global_var(shape=[1], value=-1.0, dtype=dtype, persistable=True,
                                       name=name)
    layers.increment(counter, 1.0)
    return counter


def _schedule(build):
    """Runs build() (which makes the schedule's ops and returns the rate) under the lrsched role
    of the default main program, and marks the result as a schedule (optimizers of float64
    programs cast it: optimizer.py)."""
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
    from . import layers
    return layers.fill_constant([1], "float32", float(value))


def _indicator(cond):
    """1.0 where a comparison holds, else 0.0 (float32)."""
    from . import layers
    return layers.cast(cond, "float32")


def _ratio(step, decay_steps, staircase):
    """step / decay_steps, or its floor with staircase."""
    from . import layers
    x = layers.scale(step, scale=1.0 / float(decay_steps))
    return layers.floor(x) if staircase else x


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * decay_rate ^ (step / decay_steps) (with staircase: the integer part of
    the exponent), the step counting from 0."""
    from . import layers
    _check_positive("exponential_decay", decay_steps=decay_steps, decay_rate=decay_rate)

    def build():
        x = _ratio(_step_counter(), decay_steps, staircase)
        # decay_rate ** x = exp(x * ln(decay_rate)), then times the base rate.
        return layers.scale(layers.exp(layers.scale(x, scale=math.log(decay_rate))),
                            scale=float(learning_rate))
    return _schedule(build)


def natural_exp_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * exp(-decay_rate * step / decay_steps) (staircase: floor of the ratio)."""
    from . import layers
    _check_positive("natural_exp_decay", decay_steps=decay_steps)

    def build():
        x = _ratio(_step_counter(), decay_steps, staircase)
        return layers.scale(layers.exp(layers.scale(x, scale=-float(decay_rate))),
                            scale=float(learning_rate))
    return _schedule(build)


def inverse_time_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate / (1 + decay_rate * step / decay_steps) (staircase: floor of the ratio)."""
    from . import layers
    _check_positive("inverse_time_decay", decay_steps=decay_steps)

    def build():
        x = _ratio(_step_counter(), decay_steps, staircase)
        denom = layers.scale(x, scale=float(decay_rate), bias=1.0)
        return layers.elementwise_div(_const(learning_rate), denom)
    return _schedule(build)


def polynomial_decay(learning_rate, decay_steps, end_learning_rate=0.0001, power=1.0,
                     cycle=False):
    """(learning_rate - end) * (1 - step / decay_steps) ^ power + end, with the step held at
    decay_steps; with cycle, decay_steps grows to the next multiple of itself past the step
    (Fluid's polynomial_decay)."""
    from . import layers
    _check_positive("polynomial_decay", decay_steps=decay_steps)

    def build():
        step = _step_counter()
        if cycle:
            div = layers.ceil(layers.scale(step, scale=1.0 / float(decay_steps)))
            # The first step (0) divides by one period, not zero.
            zero = _indicator(layers.less_than(step, _const(0.5)))
            div = layers.elementwise_add(div, zero)
            steps = layers.scale(div, scale=float(decay_steps))
            frac = layers.elementwise_div(step, steps)
        else:
            held = layers.elementwise_min(step, _const(decay_steps))
            frac = layers.scale(held, scale=1.0 / float(decay_steps))
        base = layers.scale(frac, scale=-1.0, bias=1.0)  # 1 - frac, in [0, 1]
        if power == 1.0:
            decayed = base
        else:
            # base ** power as exp(power * ln(base)); base = 0 gives exp(-inf) = 0.
            decayed = layers.exp(layers.scale(layers.log(base), scale=float(power)))
        return layers.scale(decayed, scale=float(learning_rate - end_learning_rate),
                            bias=float(end_learning_rate))
    return _schedule(build)


def piecewise_decay(boundaries, values):
    """values[i] while boundaries[i-1] <= step < boundaries[i] (values has one more entry than
    boundaries); each value exact, as a sum of 0/1 indicators times values."""
    from . import layers
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
                parts.append(_indicator(layers.greater_equal(step, _const(lo))))
            if hi is not None:
                parts.append(_indicator(layers.less_than(step, _const(hi))))
            ind = parts[0] if len(parts) == 1 else layers.elementwise_mul(parts[0], parts[1])
            term = layers.scale(ind, scale=float(v))
            lr = term if lr is None else layers.elementwise_add(lr, term)
        return lr
    return _schedule(build)


def noam_decay(d_model, warmup_steps, learning_rate=1.0):
    """learning_rate * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), the step
    counting from 1 (the Transformer's schedule)."""
    from . import layers
    _check_positive("noam_decay", d_model=d_model, warmup_steps=warmup_steps)

    def build():
        step = layers.scale(_step_counter(), bias=1.0)
        a = layers.rsqrt(step)
        b = layers.scale(step, scale=float(warmup_steps) ** -1.5)
        return layers.scale(layers.elementwise_min(a, b),
                            scale=float(learning_rate) * float(d_model) ** -0.5)
    return _schedule(build)


def cosine_decay(learning_rate, step_each_epoch, epochs):
    """learning_rate * 0.5 * (cos(epoch * pi / epochs) + 1), epoch = floor(step /
    step_each_epoch)."""
    from . import layers
    _check_positive("cosine_decay", step_each_epoch=step_each_epoch, epochs=epochs)

    def build():
        epoch = layers.floor(layers.scale(_step_counter(), scale=1.0 / float(step_each_epoch)))
        c = layers.cos(layers.scale(epoch, scale=math.pi / float(epochs)))
        return layers.scale(c, scale=0.5 * float(learning_rate), bias=0.5 * float(learning_rate))
    return _schedule(build)


def linear_lr_warmup(learning_rate, warmup_steps, start_lr, end_lr):
    """start_lr + (end_lr - start_lr) * step / warmup_steps while step < warmup_steps, then
    learning_rate (a number or another schedule)."""
    from . import layers
    from .framework import Variable
    _check_positive("linear_lr_warmup", warmup_steps=warmup_steps)
    if not isinstance(learning_rate, (int, float, Variable)):
        raise TypeError("linear_lr_warmup: learning_rate must be a number or a Variable, got %r"
                        % (learning_rate,))

    def build():
        step = _step_counter()
        warm = layers.scale(step, scale=(float(end_lr) - float(start_lr)) / float(warmup_steps),
                            bias=float(start_lr))
        during = _indicator(layers.less_than(step, _const(warmup_steps)))
        after = layers.scale(during, scale=-1.0, bias=1.0)
        rest = learning_rate if isinstance(learning_rate, Variable) else _const(learning_rate)
        if isinstance(rest, Variable) and rest.dtype != during.dtype:
            rest = layers.cast(rest, "float32")
        return layers.elementwise_add(layers.elementwise_mul(warm, during),
                                      layers.elementwise_mul(rest, after))
    return _schedule(build)
