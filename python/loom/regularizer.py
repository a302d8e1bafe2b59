"""Weight decay, applied by the optimizer as ops on the gradient."""
from . import core, unique_name


def _append_simple(block, op_type, inputs, attrs=None, dtype="float32", shape=None,
                   out_slot="Out", name=None):
    out = block.create_var(name=name, dtype=dtype, shape=shape)
    block.append_op(op_type, inputs=inputs, outputs={out_slot: out}, attrs=attrs)
    return out


class WeightDecayRegularizer:
    pass


def _decayed(block, grad, decay):
    """grad + decay. A sparse gradient (SelectedRows) becomes a new dense one: every row decays,
    as it does with the dense gradient, so both give the same parameters."""
    out = grad
    if grad.desc.type() == core.VarType.SELECTED_ROWS:
        out = block.create_var(name=unique_name.generate(grad.name + ".decayed"),
                               dtype=grad.dtype, shape=grad.shape)
    block.append_op("sum", inputs={"X": [grad, decay]}, outputs={"Out": out})
    return out


class L2DecayRegularizer(WeightDecayRegularizer):
    """grad += coeff * param."""

    def __init__(self, regularization_coeff=0.0):
        self.coeff = float(regularization_coeff)

    def append_ops(self, block, param, grad):
        decay = _append_simple(block, "scale", {"X": param}, {"scale": self.coeff},
                               dtype=param.dtype, shape=param.shape)
        return _decayed(block, grad, decay)


class L1DecayRegularizer(WeightDecayRegularizer):
    """grad += coeff * sign(param)."""

    def __init__(self, regularization_coeff=0.0):
        self.coeff = float(regularization_coeff)

    def append_ops(self, block, param, grad):
        sign = _append_simple(block, "sign", {"X": param}, {}, dtype=param.dtype,
                              shape=param.shape)
        decay = _append_simple(block, "scale", {"X": sign}, {"scale": self.coeff},
                               dtype=param.dtype, shape=param.shape)
        return _decayed(block, grad, decay)


L2Decay = L2DecayRegularizer
L1Decay = L1DecayRegularizer
