"""Learning-rate schedules built from ops (op_role lrsched), so that a transpiler can move them:
the parameter-server transpiler runs them on the servers, once per step."""
import math

from . import core
from .framework import _op_role_guard, default_main_program


def _step_counter(dtype="float32"):
    """A persistable counter that is 0 on the first step and grows by one each step (Fluid's
    autoincreased_step_counter(begin=0))."""
    from . import layers
    counter = layers.create_global_var(shape=[1], value=-1.0, dtype=dtype, persistable=True,
                                       name="@LR_DECAY_COUNTER@")
    layers.increment(counter, 1.0)
    return counter


def exponential_decay(learning_rate, decay_steps, decay_rate, staircase=False):
    """learning_rate * decay_rate ** (step / decay_steps), step counting from 0.
    staircase (integer division of the step) is not supported yet."""
    from . import layers
    if staircase:
        raise NotImplementedError("exponential_decay: staircase=True is not supported yet")
    if decay_steps <= 0 or decay_rate <= 0:
        raise ValueError("exponential_decay: decay_steps and decay_rate must be > 0, got %r, %r"
                         % (decay_steps, decay_rate))
    program = default_main_program()
    with _op_role_guard(program, core.kOpRoleLRSched):
        step = _step_counter()
        # decay_rate ** x = exp(x * ln(decay_rate)), then times the base rate.
        x = layers.scale(step, scale=math.log(decay_rate) / float(decay_steps))
        lr = layers.scale(layers.exp(x), scale=float(learning_rate))
    lr._lr_schedule = True  # optimizers of float64 programs cast it (optimizer.py)
    return lr
