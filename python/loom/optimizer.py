"""Optimizers: ``opt.minimize(loss)`` appends backward and one update op per parameter.
Every update op gets op_role = optimize and op_role_var = [param, grad]."""
import contextlib

from . import clip, core, layers, unique_name
from .backward import append_backward
from .framework import (Program, Variable, _fill_value_attrs, _op_role_guard, convert_dtype,
                        default_main_program, default_startup_program, program_guard)
from .layers.tensor import assign, cast


class Optimizer:
    _op_type = None

    def __init__(self, learning_rate, regularization=None, name=None, grad_clip=None):
        if not isinstance(learning_rate, (int, float, Variable)):
            raise TypeError("learning_rate must be a float or a Variable, got %r" % (learning_rate,))
        if isinstance(learning_rate, (int, float)) and learning_rate < 0:
            raise ValueError("learning_rate must be >= 0, got %r" % (learning_rate,))
        self._learning_rate = learning_rate
        self.regularization = regularization
        self._name = name or self.__class__.__name__.lower()
        self._lr_var = None
        self._accumulators = {}
        self._grad_clip = grad_clip

    def _create_global_var(self, program, startup, name, value, shape=(1,), dtype="float32"):
        block = program.global_block()
        var = block.create_var(name=name, shape=list(shape), dtype=dtype, persistable=True,
                               stop_gradient=True)
        sblock = startup.global_block()
        sv = sblock.create_var(name=name, shape=list(shape), dtype=dtype, persistable=True)
        attrs = {"shape": [int(s) for s in shape]}
        attrs.update(_fill_value_attrs(value, sv.dtype))
        sblock.append_op("fill_constant", outputs={"Out": sv}, attrs=attrs)
        return var

    def _lr(self, program, startup, dtype="float32"):
        """The learning-rate variable, of the parameters' dtype (as Fluid takes the loss's):
        float64 programs train with a float64 learning rate."""
        if isinstance(self._learning_rate, Variable):
            lr = self._learning_rate
            if getattr(lr, "_lr_schedule", False) and \
                    convert_dtype(lr.dtype) != convert_dtype(dtype):
                # A schedule (computed in float32, as Fluid's) drives a float64 program: cast once
                # per step, as part of the schedule (a transpiler moves it with the schedule's
                # ops). Any other learning-rate variable must have the parameters' dtype.
                with _op_role_guard(program, core.kOpRoleLRSched):
                    lr = cast(lr, dtype)
            return lr
        if self._lr_var is None:
            self._lr_var = self._create_global_var(
                program, startup, unique_name.generate("learning_rate"), self._learning_rate,
                dtype=dtype)
        return self._lr_var

    def _add_accumulator(self, program, startup, kind, param, value=0.0, shape=None):
        name = "%s_%s_%s" % (param.name, self._name, kind)
        var = self._create_global_var(program, startup, name, value,
                                      shape=param.shape if shape is None else shape,
                                      dtype=param.dtype)
        self._accumulators[(kind, param.name)] = var
        return var

    def _append_update(self, block, param, grad, lr, program, startup):
        raise NotImplementedError

    def backward(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        return append_backward(loss, parameter_list, no_grad_set)

    def apply_gradients(self, params_grads, program, startup):
        block = program.global_block()
        ops = []
        with _op_role_guard(program, core.kOpRoleOptimize):
            dtype = params_grads[0][0].dtype if params_grads else "float32"
            if int(dtype) == int(core.DataType.FP16):
                dtype = "float32"  # mixed precision: the optimizer's scalars stay float32
            lr = self._lr(program, startup, dtype)
            grad_clip = self._grad_clip or clip._current_clip()
            if grad_clip is not None:
                grad_clip.append_ops(block, params_grads)
            for param, grad in params_grads:
                reg = getattr(param, "regularizer", None) or self.regularization
                # The decayed gradient: the gradient itself, or a new dense variable when the
                # gradient is sparse; op_role_var still names the gradient backward wrote.
                update_grad = grad if reg is None else reg.append_ops(block, param, grad)
                op = self._append_update(block, param, update_grad, lr, program, startup)
                op._set_attr("op_role_var", [param.name, grad.name])
                ops.append(op)
        return ops

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        """Appends backward and the update ops; returns (optimize_ops, [(param, grad)])."""
        startup = startup_program or default_startup_program()
        params_grads = self.backward(loss, startup, parameter_list, no_grad_set)
        if not params_grads:
            raise ValueError("minimize: loss '%s' depends on no trainable parameter" % loss.name)
        ops = self.apply_gradients(params_grads, loss.block.program, startup)
        return ops, params_grads


class SGDOptimizer(Optimizer):
    """param -= lr * grad."""

    def _append_update(self, block, param, grad, lr, program, startup):
        return block.append_op("sgd", inputs={"Param": param, "Grad": grad, "LearningRate": lr},
                               outputs={"ParamOut": param})


class MomentumOptimizer(Optimizer):
    """velocity = mu * velocity + grad; param -= lr * (grad + mu * velocity if nesterov else velocity)."""

    def __init__(self, learning_rate, momentum, use_nesterov=False, regularization=None,
                 name=None, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._momentum = float(momentum)
        self._nesterov = bool(use_nesterov)

    def _append_update(self, block, param, grad, lr, program, startup):
        v = self._add_accumulator(program, startup, "velocity", param)
        return block.append_op("momentum",
                               inputs={"Param": param, "Grad": grad, "Velocity": v,
                                       "LearningRate": lr},
                               outputs={"ParamOut": param, "VelocityOut": v},
                               attrs={"mu": self._momentum, "use_nesterov": self._nesterov})


class AdamOptimizer(Optimizer):
    """Adam with bias-corrected moments; beta powers live in per-parameter vars."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 regularization=None, name=None, lazy_mode=False, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)
        # lazy_mode: only the rows a sparse gradient (an embedding with is_sparse=True) has
        # move, as Fluid's lazy Adam over a SelectedRows; with a dense gradient, the rows
        # (dim 0) whose gradient is nonzero.
        self._lazy = bool(lazy_mode)

    def _append_update(self, block, param, grad, lr, program, startup):
        m1 = self._add_accumulator(program, startup, "moment1", param)
        m2 = self._add_accumulator(program, startup, "moment2", param)
        b1 = self._add_accumulator(program, startup, "beta1_pow_acc", param, self._beta1, [1])
        b2 = self._add_accumulator(program, startup, "beta2_pow_acc", param, self._beta2, [1])
        return block.append_op(
            "adam",
            inputs={"Param": param, "Grad": grad, "LearningRate": lr, "Moment1": m1,
                    "Moment2": m2, "Beta1Pow": b1, "Beta2Pow": b2},
            outputs={"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2,
                     "Beta1PowOut": b1, "Beta2PowOut": b2},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                   "lazy_mode": self._lazy})


class AdagradOptimizer(Optimizer):
    """moment += grad^2; param -= lr * grad / (sqrt(moment) + epsilon)."""

    def __init__(self, learning_rate, epsilon=1.0e-6, regularization=None, name=None,
                 initial_accumulator_value=0.0, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._epsilon = float(epsilon)
        self._initial = float(initial_accumulator_value)

    def _append_update(self, block, param, grad, lr, program, startup):
        m = self._add_accumulator(program, startup, "moment", param, self._initial)
        return block.append_op("adagrad",
                               inputs={"Param": param, "Grad": grad, "Moment": m,
                                       "LearningRate": lr},
                               outputs={"ParamOut": param, "MomentOut": m},
                               attrs={"epsilon": self._epsilon})


class DecayedAdagradOptimizer(Optimizer):
    """moment = decay * moment + (1 - decay) * grad^2; param -= lr * grad / (sqrt(moment) +
    epsilon)."""

    def __init__(self, learning_rate, decay=0.95, epsilon=1.0e-6, regularization=None, name=None,
                 grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._decay, self._epsilon = float(decay), float(epsilon)

    def _append_update(self, block, param, grad, lr, program, startup):
        m = self._add_accumulator(program, startup, "moment", param)
        return block.append_op("decayed_adagrad",
                               inputs={"Param": param, "Grad": grad, "Moment": m,
                                       "LearningRate": lr},
                               outputs={"ParamOut": param, "MomentOut": m},
                               attrs={"decay": self._decay, "epsilon": self._epsilon})


class RMSPropOptimizer(Optimizer):
    """mean_square = rho * mean_square + (1 - rho) * grad^2; centered also keeps mean_grad (the
    same average of grad) and uses mean_square - mean_grad^2; moment = momentum * moment + lr *
    grad / sqrt(that + epsilon); param -= moment."""

    def __init__(self, learning_rate, rho=0.95, epsilon=1.0e-6, momentum=0.0, centered=False,
                 regularization=None, name=None, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        if rho is None or epsilon is None or momentum is None:
            raise ValueError("RMSPropOptimizer: rho, epsilon and momentum must be numbers")
        self._rho, self._epsilon = float(rho), float(epsilon)
        self._momentum, self._centered = float(momentum), bool(centered)

    def _append_update(self, block, param, grad, lr, program, startup):
        mom = self._add_accumulator(program, startup, "momentum", param)
        ms = self._add_accumulator(program, startup, "mean_square", param)
        inputs = {"Param": param, "Grad": grad, "Moment": mom, "MeanSquare": ms,
                  "LearningRate": lr}
        outputs = {"ParamOut": param, "MomentOut": mom, "MeanSquareOut": ms}
        if self._centered:
            mg = self._add_accumulator(program, startup, "mean_grad", param)
            inputs["MeanGrad"] = mg
            outputs["MeanGradOut"] = mg
        return block.append_op("rmsprop", inputs=inputs, outputs=outputs,
                               attrs={"epsilon": self._epsilon, "decay": self._rho,
                                      "momentum": self._momentum, "centered": self._centered})


class AdamaxOptimizer(Optimizer):
    """Adam with the infinity norm: moment = beta1 * moment + (1 - beta1) * grad; inf_norm =
    max(beta2 * inf_norm + epsilon, |grad|); param -= lr / (1 - beta1^t) * moment / inf_norm."""

    def __init__(self, learning_rate=0.001, beta1=0.9, beta2=0.999, epsilon=1e-8,
                 regularization=None, name=None, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)

    def _append_update(self, block, param, grad, lr, program, startup):
        m = self._add_accumulator(program, startup, "moment", param)
        u = self._add_accumulator(program, startup, "inf_norm", param)
        b1 = self._add_accumulator(program, startup, "beta1_pow_acc", param, self._beta1, [1])
        return block.append_op(
            "adamax",
            inputs={"Param": param, "Grad": grad, "LearningRate": lr, "Moment": m,
                    "InfNorm": u, "Beta1Pow": b1},
            outputs={"ParamOut": param, "MomentOut": m, "InfNormOut": u, "Beta1PowOut": b1},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon})


class AdadeltaOptimizer(Optimizer):
    """avg_sq_grad = rho * avg_sq_grad + (1 - rho) * grad^2; update = -sqrt((avg_sq_update +
    epsilon) / (avg_sq_grad + epsilon)) * grad; avg_sq_update = rho * avg_sq_update + (1 - rho) *
    update^2; param += update. As in Fluid 1.x, learning_rate is taken but not applied (the
    step size is Adadelta's own)."""

    def __init__(self, learning_rate, epsilon=1.0e-6, rho=0.95, regularization=None, name=None,
                 grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._epsilon, self._rho = float(epsilon), float(rho)

    def _append_update(self, block, param, grad, lr, program, startup):
        g2 = self._add_accumulator(program, startup, "avg_squared_grad", param)
        u2 = self._add_accumulator(program, startup, "avg_squared_update", param)
        return block.append_op(
            "adadelta",
            inputs={"Param": param, "Grad": grad, "AvgSquaredGrad": g2, "AvgSquaredUpdate": u2},
            outputs={"ParamOut": param, "AvgSquaredGradOut": g2, "AvgSquaredUpdateOut": u2},
            attrs={"epsilon": self._epsilon, "rho": self._rho})


class LambOptimizer(Optimizer):
    """LAMB: Adam's bias-corrected step r = m_hat / (sqrt(v_hat) + epsilon) + weight_decay *
    param, scaled per parameter by the trust ratio ||param|| / ||r|| (1 when either is 0):
    param -= lr * ratio * r. exclude_from_weight_decay_fn(param) -> True drops the decay."""

    def __init__(self, learning_rate=0.001, lamb_weight_decay=0.01, beta1=0.9, beta2=0.999,
                 epsilon=1e-6, regularization=None, exclude_from_weight_decay_fn=None, name=None,
                 grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._wd = float(lamb_weight_decay)
        self._beta1, self._beta2, self._epsilon = float(beta1), float(beta2), float(epsilon)
        self._exclude = exclude_from_weight_decay_fn

    def _append_update(self, block, param, grad, lr, program, startup):
        m1 = self._add_accumulator(program, startup, "moment1", param)
        m2 = self._add_accumulator(program, startup, "moment2", param)
        b1 = self._add_accumulator(program, startup, "beta1_pow_acc", param, self._beta1, [1])
        b2 = self._add_accumulator(program, startup, "beta2_pow_acc", param, self._beta2, [1])
        wd = 0.0 if self._exclude is not None and self._exclude(param) else self._wd
        return block.append_op(
            "lamb",
            inputs={"Param": param, "Grad": grad, "LearningRate": lr, "Moment1": m1,
                    "Moment2": m2, "Beta1Pow": b1, "Beta2Pow": b2},
            outputs={"ParamOut": param, "Moment1Out": m1, "Moment2Out": m2,
                     "Beta1PowOut": b1, "Beta2PowOut": b2},
            attrs={"beta1": self._beta1, "beta2": self._beta2, "epsilon": self._epsilon,
                   "weight_decay": wd})


class LarsMomentumOptimizer(Optimizer):
    """Momentum with a layer-wise rate: local_lr = lr * lars_coeff * ||param|| / (||grad|| +
    lars_weight_decay * ||param||) (lr when either norm is 0); velocity = momentum * velocity +
    local_lr * (grad + lars_weight_decay * param); param -= velocity."""

    def __init__(self, learning_rate, momentum, lars_coeff=0.001, lars_weight_decay=0.0005,
                 regularization=None, name=None, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._momentum, self._coeff = float(momentum), float(lars_coeff)
        self._wd = float(lars_weight_decay)

    def _append_update(self, block, param, grad, lr, program, startup):
        v = self._add_accumulator(program, startup, "velocity", param)
        return block.append_op(
            "lars_momentum",
            inputs={"Param": param, "Grad": grad, "Velocity": v, "LearningRate": lr},
            outputs={"ParamOut": param, "VelocityOut": v},
            attrs={"mu": self._momentum, "lars_coeff": self._coeff,
                   "lars_weight_decay": self._wd})


class FtrlOptimizer(Optimizer):
    """FTRL-Proximal (McMahan et al.) with L1 / L2 and a learning-rate power, as Fluid's ftrl
    op: squared and linear accumulators per parameter."""

    def __init__(self, learning_rate, l1=0.0, l2=0.0, lr_power=-0.5, regularization=None,
                 name=None, grad_clip=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        self._l1, self._l2, self._lr_power = float(l1), float(l2), float(lr_power)

    def _append_update(self, block, param, grad, lr, program, startup):
        sq = self._add_accumulator(program, startup, "squared", param)
        lin = self._add_accumulator(program, startup, "linear", param)
        return block.append_op(
            "ftrl",
            inputs={"Param": param, "Grad": grad, "SquaredAccumulator": sq,
                    "LinearAccumulator": lin, "LearningRate": lr},
            outputs={"ParamOut": param, "SquaredAccumOut": sq, "LinearAccumOut": lin},
            attrs={"l1": self._l1, "l2": self._l2, "lr_power": self._lr_power})


SGD = SGDOptimizer
Momentum = MomentumOptimizer
Adam = AdamOptimizer
Adagrad = AdagradOptimizer
DecayedAdagrad = DecayedAdagradOptimizer
RMSProp = RMSPropOptimizer
Adamax = AdamaxOptimizer
Adadelta = AdadeltaOptimizer
Lamb = LambOptimizer
LarsMomentum = LarsMomentumOptimizer
Ftrl = FtrlOptimizer


class DpsgdOptimizer(Optimizer):
    """Differentially private SGD (Fluid's Dpsgd): each parameter's gradient is clipped to L2
    norm `clip`, Gaussian noise of standard deviation `sigma`, divided by `batch_size`, is
    added per element, and param -= lr * that. The noise of each step is a pure function of
    the program's random_seed (or `seed`) and the step, so a seeded program trains the same
    way on every run; seed 0 with random_seed 0 draws fresh noise."""

    def __init__(self, learning_rate=0.001, clip=0.9, batch_size=0.999, sigma=1e-8,
                 regularization=None, name=None, grad_clip=None, seed=None):
        super().__init__(learning_rate, regularization, name, grad_clip)
        for what, v, lo in (("clip", clip, 0.0), ("batch_size", batch_size, 0.0)):
            if not float(v) > lo:
                raise ValueError("Dpsgd: %s must be > 0, got %r" % (what, v))
        if not float(sigma) >= 0:
            raise ValueError("Dpsgd: sigma must be >= 0, got %r" % (sigma,))
        self._clip, self._batch_size, self._sigma = float(clip), float(batch_size), float(sigma)
        self._seed = seed

    def _append_update(self, block, param, grad, lr, program, startup):
        step = self._create_global_var(program, startup, "%s_%s_step" % (param.name, self._name),
                                       0, dtype="int64")
        seed = self._seed if self._seed is not None else program.random_seed
        return block.append_op(
            "dpsgd", inputs={"Param": param, "Grad": grad, "LearningRate": lr, "Step": step},
            outputs={"ParamOut": param, "StepOut": step},
            attrs={"clip": self._clip, "batch_size": self._batch_size, "sigma": self._sigma,
                   "seed": int(seed or 0)})


Dpsgd = DpsgdOptimizer


def _current_block():
    """The block ops are appended to now (a Switch case's sub-block inside one)."""
    from .framework import default_main_program
    return default_main_program().current_block()


def _averaged_params(program):
    return [p for p in program.global_block().all_parameters()
            if getattr(p, "do_model_average", True) is not False]


class _ParamSwap:
    """Programs that put averaged values into the parameters (apply) and put them back
    (restore), run by the executor on the scope training uses: the apply / restore of
    ModelAverage and ExponentialMovingAverage."""

    def _build_swap(self, params, fill):
        """fill(block, param_var) appends the ops that write the averaged value into param."""
        self._backups = {}
        self.apply_program, self.restore_program = Program(), Program()
        with program_guard(self.apply_program, Program()):
            block = self.apply_program.global_block()
            for p in params:
                pv = block.create_var(name=p.name, shape=p.shape, dtype=p.dtype,
                                      persistable=True)
                backup = block.create_var(name=unique_name.generate(p.name + ".avg_backup"),
                                          shape=p.shape, dtype=p.dtype, persistable=True)
                self._backups[p.name] = backup.name
                assign(pv, backup)
                fill(block, pv)
        with program_guard(self.restore_program, Program()):
            block = self.restore_program.global_block()
            for p in params:
                pv = block.create_var(name=p.name, shape=p.shape, dtype=p.dtype,
                                      persistable=True)
                backup = block.create_var(name=self._backups[p.name], shape=p.shape,
                                          dtype=p.dtype, persistable=True)
                assign(backup, pv)

    def apply(self, executor, need_restore=True):
        """A context manager: inside it the parameters hold the averaged values (evaluate or
        save the model there); on exit they are restored unless need_restore=False."""

        @contextlib.contextmanager
        def applied():
            executor.run(self.apply_program)
            try:
                yield
            finally:
                if need_restore:
                    self.restore(executor)
        return applied()

    def restore(self, executor):
        """Puts back the parameters apply() replaced."""
        executor.run(self.restore_program)


class ModelAverage(_ParamSwap):
    """Fluid's ModelAverage: the average of each parameter over a sliding window of recent
    steps, for evaluation. Build it after minimize(); each training step then adds the
    parameters to running sums (the average_accumulates op). The window holds between
    min_average_window and max_average_window steps, and about average_window_rate times the
    steps so far; apply(exe) puts (current window + the one before) / their step count into
    the parameters, restore(exe) puts the trained values back. Parameters whose ParamAttr has
    do_model_average=False are left out."""

    def __init__(self, average_window_rate, min_average_window=10000, max_average_window=10000,
                 regularization=None, name=None):
        state = Optimizer(0.0, name=name or "modelaverage")  # makes the accumulators
        if not float(average_window_rate) >= 0:
            raise ValueError("ModelAverage: average_window_rate must be >= 0, got %r"
                             % (average_window_rate,))
        if not 0 < int(min_average_window) <= int(max_average_window):
            raise ValueError("ModelAverage: need 0 < min_average_window <= max_average_window, "
                             "got %r and %r" % (min_average_window, max_average_window))
        self.average_window = float(average_window_rate)
        self.min_average_window = int(min_average_window)
        self.max_average_window = int(max_average_window)
        program = default_main_program()
        startup = default_startup_program()
        params = _averaged_params(program)
        if not params:
            raise ValueError("ModelAverage: the main program has no parameter to average")
        block = program.global_block()
        self._state = {}
        with _op_role_guard(program, core.kOpRoleOptimize):
            for p in params:
                sums = [state._add_accumulator(program, startup, "sum_%d" % i, p)
                        for i in (1, 2, 3)]
                counts = [state._create_global_var(program, startup,
                                                   "%s_%s_%s" % (p.name, state._name, kind), 0,
                                                   dtype="int64")
                          for kind in ("num_accumulates", "old_num_accumulates",
                                       "num_updates")]
                self._state[p.name] = sums + counts
                block.append_op(
                    "average_accumulates",
                    inputs={"param": p, "in_sum_1": sums[0], "in_sum_2": sums[1],
                            "in_sum_3": sums[2], "in_num_accumulates": counts[0],
                            "in_old_num_accumulates": counts[1], "in_num_updates": counts[2]},
                    outputs={"out_sum_1": sums[0], "out_sum_2": sums[1], "out_sum_3": sums[2],
                             "out_num_accumulates": counts[0],
                             "out_old_num_accumulates": counts[1],
                             "out_num_updates": counts[2]},
                    attrs={"average_window": self.average_window,
                           "min_average_window": self.min_average_window,
                           "max_average_window": self.max_average_window})

        def fill(block, pv):
            s1, s2, s3, n1, n2, _ = [block.create_var(name=v.name, shape=v.shape,
                                                      dtype=v.dtype, persistable=True)
                                     for v in self._state[pv.name]]
            count = layers.elementwise_add(n1, n2)
            # Before the first step there is nothing to average: the parameter stays.
            with layers.Switch() as switch:
                with switch.case(layers.greater_than(
                        count, layers.fill_constant([1], "int64", 0))):
                    block_now = _current_block()
                    block_now.append_op("elementwise_div",
                                        inputs={"X": layers.sums([s1, s2, s3]),
                                                "Y": cast(count, pv.dtype)},
                                        outputs={"Out": pv.name}, attrs={"axis": -1})
        self._build_swap(params, fill)



class ExponentialMovingAverage(_ParamSwap):
    """Fluid's ExponentialMovingAverage: ema = decay * ema + (1 - decay) * param after each step
    (update() appends those ops to the main program: call it after minimize()). With
    thres_steps (a step Variable) the decay is min(decay, (1 + t) / (10 + t)). apply(exe) puts
    the bias-corrected average ema / (1 - decay^steps) into the parameters, restore(exe) puts
    the trained values back. Parameters whose ParamAttr has do_model_average=False are left
    out."""

    def __init__(self, decay=0.999, thres_steps=None, name=None):
        if not 0.0 <= float(decay) <= 1.0:
            raise ValueError("ExponentialMovingAverage: decay must be in [0, 1], got %r"
                             % (decay,))
        if thres_steps is not None and not isinstance(thres_steps, Variable):
            raise TypeError("ExponentialMovingAverage: thres_steps must be a Variable (the "
                            "global step), got %r" % (thres_steps,))
        self._decay = float(decay)
        self._name = name or ""
        program = default_main_program()
        self._params = _averaged_params(program)
        if not self._params:
            raise ValueError("ExponentialMovingAverage: the main program has no parameter")
        self._counter = unique_name.generate("@EMA_STEP_COUNTER@")
        self._decay_var = layers.create_global_var(
            [1], self._decay, "float32", persistable=True,
            name=unique_name.generate(self._name + "scheduled_ema_decay_rate"))
        if thres_steps is not None:
            with _op_role_guard(program, core.kOpRoleLRSched):
                t = cast(thres_steps, "float32")
                decay_t = layers.elementwise_div(layers.scale(t, 1.0, 1.0),
                                                 layers.scale(t, 1.0, 10.0))
                layers.assign(layers.elementwise_min(
                    decay_t, layers.fill_constant([1], "float32", self._decay)),
                    self._decay_var)
        self._emas = {p.name: layers.create_global_var(
            p.shape, 0.0, p.dtype, persistable=True,
            name=unique_name.generate(self._name + p.name + "_ema")) for p in self._params}
        self._updated = False

        def fill(block, pv):
            ema = block.create_var(name=self._emas[pv.name].name, shape=pv.shape,
                                   dtype=pv.dtype, persistable=True)
            decay = block.create_var(name=self._decay_var.name, shape=[1], dtype="float32",
                                     persistable=True)
            step = block.create_var(name=self._counter, shape=[1], dtype="int64",
                                    persistable=True)
            # Before the first update the average is empty: the parameter stays.
            with layers.Switch() as switch:
                with switch.case(layers.greater_than(
                        step, layers.fill_constant([1], "int64", 0))):
                    corr = layers.scale(layers.elementwise_pow(cast(decay, pv.dtype),
                                                               cast(step, pv.dtype)), -1.0, 1.0)
                    _current_block().append_op(
                        "elementwise_div", inputs={"X": ema, "Y": corr},
                        outputs={"Out": pv.name}, attrs={"axis": -1})
        self._build_swap(self._params, fill)

    def update(self):
        """Appends the moving-average ops to the main program (once, after minimize)."""
        if self._updated:
            raise RuntimeError("ExponentialMovingAverage.update() was already called")
        self._updated = True
        program = default_main_program()
        with _op_role_guard(program, core.kOpRoleOptimize):
            layers.autoincreased_step_counter(self._counter, begin=1, step=1)
            decays = {}
            for p in self._params:
                dt = convert_dtype(p.dtype)
                if dt not in decays:
                    decays[dt] = cast(self._decay_var, p.dtype)
                d = decays[dt]
                ema = self._emas[p.name]
                # ema + (1 - decay) * (param - ema) would round differently from Fluid's form
                new = layers.elementwise_add(
                    layers.elementwise_mul(ema, d),
                    layers.elementwise_mul(p, layers.scale(d, -1.0, 1.0)))
                layers.assign(new, ema)


class LookaheadOptimizer:
    """Lookahead (Zhang et al. 2019, Fluid's LookaheadOptimizer): the inner optimizer moves
    the fast weights every step; every k steps the slow weights move alpha of the way to them,
    slow += alpha * (fast - slow), and the fast weights restart from the slow ones."""

    def __init__(self, inner_optimizer, alpha=0.5, k=5):
        if inner_optimizer is None or not hasattr(inner_optimizer, "minimize"):
            raise ValueError("LookaheadOptimizer: inner_optimizer must be an optimizer, got %r"
                             % (inner_optimizer,))
        if not 0.0 <= float(alpha) <= 1.0:
            raise ValueError("LookaheadOptimizer: alpha must be in [0, 1], got %r" % (alpha,))
        if not isinstance(k, int) or k <= 0:
            raise ValueError("LookaheadOptimizer: k must be a positive int, got %r" % (k,))
        self.inner_optimizer = inner_optimizer
        self.alpha = float(alpha)
        self.k = k

    def minimize(self, loss, startup_program=None, parameter_list=None, no_grad_set=None):
        out = self.inner_optimizer.minimize(loss, startup_program, parameter_list, no_grad_set)
        startup = startup_program or default_startup_program()
        program = loss.block.program
        main = program.global_block()
        sblock = startup.global_block()
        params = [p for p in main.all_parameters() if p.trainable]
        slow = {}
        for p in params:
            name = p.name + "@SLOW"
            slow[p.name] = main.create_var(name=name, shape=p.shape, dtype=p.dtype,
                                           persistable=True, stop_gradient=True)
            sv = sblock.create_var(name=name, shape=p.shape, dtype=p.dtype, persistable=True)
            sblock.append_op("assign", inputs={"X": p.name}, outputs={"Out": sv})
        with _op_role_guard(program, core.kOpRoleOptimize):
            step = layers.create_global_var([1], 0, "int64", persistable=True,
                                            name=unique_name.generate("lookahead_step"))
            layers.increment(step, 1.0)
            k = layers.fill_constant([1], "int64", self.k)
            sync = layers.equal(layers.elementwise_mod(step, k),
                                layers.fill_constant([1], "int64", 0))
            with layers.Switch() as switch:
                with switch.case(sync):
                    for p in params:
                        s = slow[p.name]
                        new = layers.elementwise_add(layers.scale(p, self.alpha),
                                                     layers.scale(s, 1.0 - self.alpha))
                        layers.assign(new, s)
                        layers.assign(new, p)
        return out
