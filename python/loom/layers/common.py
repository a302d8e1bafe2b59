"""Helpers the layer modules share: argument checks and the one-op layer."""
from ..framework import Variable
from ..layer_helper import LayerHelper


def _check_var(x, what, layer):
    if not isinstance(x, Variable):
        raise TypeError("%s: %s must be a Variable, got %r" % (layer, what, x))


def _unary(op_type, x, attrs=None, name=None):
    _check_var(x, "input", op_type)
    helper = LayerHelper(op_type, name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op(op_type, inputs={"X": x}, outputs={"Out": out}, attrs=attrs)
    return out
