"""Optimizers: ``opt.minimize(loss)`` appends backward and one update op per parameter.
Every update op gets op_role = optimize and op_role_var = [param, grad]."""
from . import clip, core, unique_name
from .backward import append_backward
from .framework import (Variable, _fill_value_attrs, _op_role_guard, convert_dtype,
                        default_startup_program)
from .layers.tensor import cast


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
