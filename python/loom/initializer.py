"""Initializers: each appends one op to the startup program that fills a parameter."""
import math

import numpy as np

from . import core
from .framework import _fill_value_attrs


class Initializer:
    def __call__(self, var, block):
        raise NotImplementedError


def _shape(var):
    return [int(s) for s in var.shape]


class ConstantInitializer(Initializer):
    def __init__(self, value=0.0, force_cpu=False):
        self.value = float(value)

    def __call__(self, var, block):
        attrs = {"shape": _shape(var)}
        attrs.update(_fill_value_attrs(self.value, var.dtype))
        return block.append_op("fill_constant", outputs={"Out": var}, attrs=attrs)


class UniformInitializer(Initializer):
    def __init__(self, low=-1.0, high=1.0, seed=0):
        if low > high:
            raise ValueError("UniformInitializer: low (%g) > high (%g)" % (low, high))
        self.low, self.high, self.seed = float(low), float(high), int(seed)

    def __call__(self, var, block):
        seed = self.seed or block.program.random_seed
        return block.append_op("uniform_random", outputs={"Out": var},
                               attrs={"shape": _shape(var), "min": self.low, "max": self.high,
                                      "seed": seed, "dtype": int(var.dtype)})


class NormalInitializer(Initializer):
    def __init__(self, loc=0.0, scale=1.0, seed=0):
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def __call__(self, var, block):
        seed = self.seed or block.program.random_seed
        return block.append_op("gaussian_random", outputs={"Out": var},
                               attrs={"shape": _shape(var), "mean": self.loc, "std": self.scale,
                                      "seed": seed, "dtype": int(var.dtype)})


def _fans(var):
    shape = _shape(var)
    if len(shape) < 2:
        return shape[0] if shape else 1, shape[0] if shape else 1
    if len(shape) == 2:
        return shape[0], shape[1]
    receptive = 1
    for s in shape[2:]:
        receptive *= s
    return shape[1] * receptive, shape[0] * receptive


class XavierInitializer(Initializer):
    """Glorot: uniform in ±sqrt(6/(fan_in+fan_out)) or normal with std sqrt(2/(fan_in+fan_out))."""

    def __init__(self, uniform=True, fan_in=None, fan_out=None, seed=0):
        self.uniform, self.fan_in, self.fan_out, self.seed = uniform, fan_in, fan_out, seed

    def __call__(self, var, block):
        fi, fo = _fans(var)
        fi = self.fan_in or fi
        fo = self.fan_out or fo
        if self.uniform:
            limit = math.sqrt(6.0 / (fi + fo))
            return UniformInitializer(-limit, limit, self.seed)(var, block)
        return NormalInitializer(0.0, math.sqrt(2.0 / (fi + fo)), self.seed)(var, block)


class MSRAInitializer(Initializer):
    """He: uniform in ±sqrt(6/fan_in) or normal with std sqrt(2/fan_in)."""

    def __init__(self, uniform=True, fan_in=None, seed=0):
        self.uniform, self.fan_in, self.seed = uniform, fan_in, seed

    def __call__(self, var, block):
        fi = self.fan_in or _fans(var)[0]
        if self.uniform:
            limit = math.sqrt(6.0 / fi)
            return UniformInitializer(-limit, limit, self.seed)(var, block)
        return NormalInitializer(0.0, math.sqrt(2.0 / fi), self.seed)(var, block)


Constant = ConstantInitializer
Uniform = UniformInitializer
Normal = NormalInitializer
Xavier = XavierInitializer
MSRA = MSRAInitializer


class TruncatedNormalInitializer(Initializer):
    """Normal values redrawn until within two standard deviations of loc."""

    def __init__(self, loc=0.0, scale=1.0, seed=0):
        if scale <= 0:
            raise ValueError("TruncatedNormalInitializer: scale must be > 0, got %r" % (scale,))
        self.loc, self.scale, self.seed = float(loc), float(scale), int(seed)

    def __call__(self, var, block):
        seed = self.seed or block.program.random_seed
        return block.append_op("truncated_gaussian_random", outputs={"Out": var},
                               attrs={"shape": _shape(var), "mean": self.loc, "std": self.scale,
                                      "seed": seed, "dtype": int(var.dtype)})


class NumpyArrayInitializer(Initializer):
    """The given numpy array's values (its shape must be the variable's)."""

    def __init__(self, value):
        self.value = np.asarray(value)

    def __call__(self, var, block):
        shape = _shape(var)
        if list(self.value.shape) != list(shape):
            raise ValueError("NumpyArrayInitializer: value is %s, '%s' is %s"
                             % (list(self.value.shape), var.name, list(shape)))
        dtype = int(var.dtype)
        attrs = {"shape": list(shape), "dtype": dtype}
        if dtype in (int(core.DataType.FP32), int(core.DataType.FP64)):
            attrs["fp32_values"] = [float(v) for v in self.value.astype(np.float32).ravel()]
        elif dtype == int(core.DataType.INT32):
            attrs["int32_values"] = [int(v) for v in self.value.ravel()]
        elif dtype == int(core.DataType.INT64):
            attrs["int64_values"] = [int(v) for v in self.value.ravel()]
        else:
            raise TypeError("NumpyArrayInitializer: '%s' has an unsupported dtype" % var.name)
        return block.append_op("assign_value", outputs={"Out": var}, attrs=attrs)


class BilinearInitializer(Initializer):
    """Bilinear-interpolation weights for a conv2d_transpose filter [C, M, k, k] that upsamples
    by (k + 1) // 2 (Fluid's Bilinear)."""

    def __call__(self, var, block):
        shape = _shape(var)
        if len(shape) != 4 or shape[2] != shape[3]:
            raise ValueError("BilinearInitializer: '%s' must be a 4-D filter with square "
                             "kernels, got %s" % (var.name, list(shape)))
        k = shape[3]
        f = math.ceil(k / 2.0)
        c = (2 * f - 1 - f % 2) / (2.0 * f)
        w = np.zeros(shape, "float32")
        for i in range(k):
            for j in range(k):
                w[:, :, i, j] = (1 - abs(i / f - c)) * (1 - abs(j / f - c))
        return NumpyArrayInitializer(w)(var, block)


TruncatedNormal = TruncatedNormalInitializer
Bilinear = BilinearInitializer
