"""Activations and other element-wise functions of one input (Fluid's ``layers.ops``).
The ``act=`` argument of fc, conv2d, ... names one of ``_ACTIVATIONS``."""
from .common import _unary

__all__ = ["relu", "sigmoid", "tanh", "gelu", "leaky_relu", "exp", "log", "sqrt", "square", "floor",
           "ceil", "round", "cos", "sin", "reciprocal", "rsqrt", "softplus", "softsign", "abs",
           "softmax", "log_softmax", "elu", "relu6", "selu", "hard_sigmoid", "hard_swish", "swish",
           "softshrink", "hard_shrink", "tanh_shrink", "thresholded_relu", "logsigmoid", "sign",
           "erf", "acos", "asin", "atan", "brelu", "soft_relu", "stanh"]


_ACTIVATIONS = ("relu", "sigmoid", "tanh", "gelu", "leaky_relu", "softmax", "exp", "log",
                "sqrt", "square", "abs", "floor", "ceil", "round", "cos", "sin", "reciprocal",
                "rsqrt", "softplus", "softsign", "elu", "relu6", "selu", "hard_sigmoid",
                "hard_swish", "swish", "softshrink", "hard_shrink", "tanh_shrink",
                "thresholded_relu", "logsigmoid", "sign", "erf", "acos", "asin", "atan", "brelu",
                "soft_relu", "stanh")


def _check_act(act):
    if act is None:
        return
    if not isinstance(act, str):
        raise TypeError("act must be a string such as 'relu', got %r" % (act,))
    if act not in _ACTIVATIONS:
        raise ValueError("unknown activation %r (supported: %s)" % (act, ", ".join(_ACTIVATIONS)))


def _act(out, act):
    if act is None:
        return out
    _check_act(act)
    return globals()[act](out)


def relu(x, name=None):
    return _unary("relu", x, name=name)


def sigmoid(x, name=None):
    return _unary("sigmoid", x, name=name)


def tanh(x, name=None):
    return _unary("tanh", x, name=name)


def gelu(x, name=None):
    return _unary("gelu", x, name=name)


def leaky_relu(x, alpha=0.02, name=None):
    return _unary("leaky_relu", x, {"alpha": alpha}, name=name)


def exp(x, name=None):
    return _unary("exp", x, name=name)


def log(x, name=None):
    return _unary("log", x, name=name)


def sqrt(x, name=None):
    return _unary("sqrt", x, name=name)


def square(x, name=None):
    return _unary("square", x, name=name)


def floor(x, name=None):
    return _unary("floor", x, name=name)


def ceil(x, name=None):
    return _unary("ceil", x, name=name)


def round(x, name=None):
    return _unary("round", x, name=name)


def cos(x, name=None):
    return _unary("cos", x, name=name)


def sin(x, name=None):
    return _unary("sin", x, name=name)


def reciprocal(x, name=None):
    return _unary("reciprocal", x, name=name)


def rsqrt(x, name=None):
    return _unary("rsqrt", x, name=name)


def softplus(x, name=None):
    return _unary("softplus", x, name=name)


def softsign(x, name=None):
    return _unary("softsign", x, name=name)


def abs(x, name=None):
    return _unary("abs", x, name=name)


def softmax(input, use_cudnn=False, name=None, axis=-1):
    return _unary("softmax", input, {"axis": axis}, name=name)


def log_softmax(input, axis=-1, name=None):
    return _unary("log_softmax", input, {"axis": axis}, name=name)


def elu(x, alpha=1.0, name=None):
    return _unary("elu", x, {"alpha": float(alpha)}, name=name)


def relu6(x, threshold=6.0, name=None):
    return _unary("relu6", x, {"threshold": float(threshold)}, name=name)


def selu(x, scale=None, alpha=None, name=None):
    attrs = {}
    if scale is not None:
        attrs["scale"] = float(scale)
    if alpha is not None:
        attrs["alpha"] = float(alpha)
    return _unary("selu", x, attrs, name=name)


def hard_sigmoid(x, slope=0.2, offset=0.5, name=None):
    return _unary("hard_sigmoid", x, {"slope": float(slope), "offset": float(offset)}, name=name)


def hard_swish(x, threshold=6.0, scale=6.0, offset=3.0, name=None):
    return _unary("hard_swish", x, {"threshold": float(threshold), "scale": float(scale),
                                    "offset": float(offset)}, name=name)


def swish(x, beta=1.0, name=None):
    return _unary("swish", x, {"beta": float(beta)}, name=name)


def softshrink(x, alpha=None):
    return _unary("softshrink", x, {} if alpha is None else {"lambda": float(alpha)})


def hard_shrink(x, threshold=None):
    return _unary("hard_shrink", x, {} if threshold is None else {"threshold": float(threshold)})


def tanh_shrink(x, name=None):
    return _unary("tanh_shrink", x, name=name)


def thresholded_relu(x, threshold=None):
    return _unary("thresholded_relu", x,
                  {} if threshold is None else {"threshold": float(threshold)})


def logsigmoid(x, name=None):
    return _unary("logsigmoid", x, name=name)


def sign(x):
    return _unary("sign", x)


def erf(x, name=None):
    return _unary("erf", x, name=name)


def acos(x, name=None):
    return _unary("acos", x, name=name)


def asin(x, name=None):
    return _unary("asin", x, name=name)


def atan(x, name=None):
    return _unary("atan", x, name=name)


def brelu(x, t_min=0.0, t_max=24.0, name=None):
    return _unary("brelu", x, {"t_min": float(t_min), "t_max": float(t_max)}, name=name)


def soft_relu(x, threshold=40.0, name=None):
    return _unary("soft_relu", x, {"threshold": float(threshold)}, name=name)


def stanh(x, scale_a=0.67, scale_b=1.7159, name=None):
    return _unary("stanh", x, {"scale_a": float(scale_a), "scale_b": float(scale_b)}, name=name)
