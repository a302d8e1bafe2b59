"""Variable's operators, as in Fluid's monkey-patched variables: ``a + b``, ``a - b``,
``a * b``, ``a / b`` and ``<``, ``<=``, ``>``, ``>=`` build the layers below, a Python number
becoming a one-element constant of the variable's dtype. ``==`` and ``!=`` keep Python's
identity semantics, so that variables stay usable as dict keys and in lists (use layers.equal /
not_equal). monkey_patch_variable() installs them; importing loom.layers calls it."""
from ..framework import Variable, dtype_name
from .control_flow import greater_equal, greater_than, less_equal, less_than
from .math import elementwise_add, elementwise_div, elementwise_mul, elementwise_sub
from .tensor import fill_constant

# method name -> (layer, whether the variable is its right operand)
_OPERATORS = {
    "__add__": (elementwise_add, False),
    "__radd__": (elementwise_add, True),
    "__sub__": (elementwise_sub, False),
    "__mul__": (elementwise_mul, False),
    "__truediv__": (elementwise_div, False),
    "__lt__": (less_than, False),
    "__le__": (less_equal, False),
    "__gt__": (greater_than, False),
    "__ge__": (greater_equal, False),
}


def _operator(name, layer, reverse):
    def method(self, other):
        if not isinstance(other, Variable):
            other = fill_constant(shape=[1], dtype=dtype_name(self.dtype), value=other)
        x, y = (other, self) if reverse else (self, other)
        return layer(x, y)
    method.__name__ = name
    return method


def monkey_patch_variable():
    for name, (layer, reverse) in _OPERATORS.items():
        setattr(Variable, name, _operator(name, layer, reverse))
