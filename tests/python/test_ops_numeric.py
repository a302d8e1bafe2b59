"""One-layer programs through the Python API: forward against NumPy, gradients against finite
differences (tests/python/op_test.py), in float64."""
import numpy as np
import pytest

import loom as fluid
from op_test import OpTest

L = fluid.layers


def rand(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.RandomState(seed + len(shape)).uniform(lo, hi, shape).astype("float64")


BINARY = {
    "elementwise_add": np.add, "elementwise_sub": np.subtract, "elementwise_mul": np.multiply,
    "elementwise_div": np.divide, "elementwise_max": np.maximum, "elementwise_min": np.minimum,
    "elementwise_pow": np.power,
}


@pytest.mark.parametrize("op", sorted(BINARY))
@pytest.mark.parametrize("y_shape,axis", [((2, 3, 4), -1), ((3,), 1), ((3, 4), 1), ((4,), -1),
                                          ((2, 1), 0)])
def test_elementwise_with_axis_broadcast(op, y_shape, axis):
    x = rand(2, 3, 4, lo=0.5, hi=1.5, seed=1)
    y = rand(*y_shape, lo=0.5, hi=1.5, seed=2)
    if op in ("elementwise_max", "elementwise_min"):  # keep X and Y apart (no ties)
        y = y + np.where(np.random.RandomState(3).rand(*y_shape) < 0.5, 0.3, -0.3)
    t = OpTest(lambda x, y: getattr(L, op)(x, y, axis=axis), {"x": x, "y": y})
    start = axis if axis >= 0 else x.ndim - len(y_shape)
    yb = y.reshape(y.shape + (1,) * (x.ndim - start - y.ndim))
    t.check_forward(BINARY[op](x, yb))
    t.check_grad()


@pytest.mark.parametrize("tx,ty,alpha", [(False, False, 1.0), (True, False, 0.5),
                                         (False, True, 2.0), (True, True, 1.0)])
def test_matmul_transposes_alpha_and_batches(tx, ty, alpha):
    a = rand(2, 3, 4, seed=4)
    b = rand(2, 4, 5, seed=5)
    if tx:
        a = np.ascontiguousarray(a.transpose(0, 2, 1))
    if ty:
        b = np.ascontiguousarray(b.transpose(0, 2, 1))
    t = OpTest(lambda a, b: L.matmul(a, b, transpose_x=tx, transpose_y=ty, alpha=alpha),
               {"a": a, "b": b})
    ra = a.transpose(0, 2, 1) if tx else a
    rb = b.transpose(0, 2, 1) if ty else b
    t.check_forward(alpha * np.matmul(ra, rb))
    t.check_grad()


@pytest.mark.parametrize("axis", [-1, 1, 0])
def test_softmax_and_log_softmax(axis):
    x = rand(2, 3, 4, lo=-2, hi=2, seed=6)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    sm = e / e.sum(axis=axis, keepdims=True)
    t = OpTest(lambda x: L.softmax(x, axis=axis), {"x": x})
    t.check_forward(sm)
    t.check_grad()
    t = OpTest(lambda x: L.log_softmax(x, axis=axis), {"x": x})
    t.check_forward(np.log(sm))
    t.check_grad()


def conv_ref(x, w, stride, pad, groups):
    n, c, h, wd = x.shape
    m, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ho = (h + 2 * pad - kh) // stride + 1
    wo = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, m, ho, wo))
    mg = m // groups
    for o in range(m):
        g = o // mg
        for i in range(ho):
            for j in range(wo):
                patch = xp[:, g * cg:(g + 1) * cg, i * stride:i * stride + kh,
                           j * stride:j * stride + kw]
                out[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3))
    return out


@pytest.mark.parametrize("stride,pad,groups", [(1, 0, 1), (2, 1, 1), (1, 1, 2)])
def test_conv2d_input_and_filter_grads(stride, pad, groups):
    x = rand(2, 4, 5, 5, seed=7)
    w = rand(4, 4 // groups, 3, 3, seed=8)
    t = OpTest(lambda x: L.conv2d(x, 4, 3, stride=stride, padding=pad, groups=groups,
                                  bias_attr=False),
               {"x": x}, params={"w_0": w})
    t.check_forward(conv_ref(x, w, stride, pad, groups), rtol=1e-9, atol=1e-10)
    t.check_grad()


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_pool2d(pool_type):
    # Distinct values so max pooling has no ties, even after a finite-difference nudge.
    x = (np.random.RandomState(9).permutation(2 * 2 * 4 * 4) * 0.01).reshape(2, 2, 4, 4)
    t = OpTest(lambda x: L.pool2d(x, 2, pool_type, 2), {"x": x})
    blocks = x.reshape(2, 2, 2, 2, 2, 2)
    ref = blocks.max(axis=(3, 5)) if pool_type == "max" else blocks.mean(axis=(3, 5))
    t.check_forward(ref)
    t.check_grad(eps=1e-4)
    g = OpTest(lambda x: L.pool2d(x, pool_type=pool_type, global_pooling=True), {"x": x})
    g.check_forward(x.max(axis=(2, 3), keepdims=True) if pool_type == "max"
                    else x.mean(axis=(2, 3), keepdims=True))
    g.check_grad(eps=1e-4)


@pytest.mark.parametrize("op,ref", [("reduce_sum", np.sum), ("reduce_mean", np.mean),
                                    ("reduce_max", np.max)])
@pytest.mark.parametrize("dim,keep_dim", [(None, False), ([1], True), ([0, 2], False), (-1, True)])
def test_reductions(op, ref, dim, keep_dim):
    x = (np.random.RandomState(10).permutation(24) * 0.1 - 1.0).reshape(2, 3, 4)
    t = OpTest(lambda x: getattr(L, op)(x, dim=dim, keep_dim=keep_dim), {"x": x})
    axis = None if dim is None else tuple(dim) if isinstance(dim, list) else dim
    want = ref(x, axis=axis, keepdims=keep_dim)
    t.check_forward(np.reshape(want, (1,)) if dim is None else want)
    t.check_grad(eps=1e-4)


def test_concat_and_split():
    a, b = rand(2, 3, 2, seed=11), rand(2, 1, 2, seed=12)
    t = OpTest(lambda a, b: L.concat([a, b], axis=1), {"a": a, "b": b})
    t.check_forward(np.concatenate([a, b], axis=1))
    t.check_grad()
    x = rand(2, 6, 3, seed=13)
    s = OpTest(lambda x: L.split(x, [1, 3, -1], dim=1), {"x": x})
    s.check_forward(np.split(x, [1, 4], axis=1))
    s.check_grad()
    e = OpTest(lambda x: L.split(x, 3, dim=-1), {"x": x})
    e.check_forward(np.split(x, 3, axis=-1))
    e.check_grad()


def test_slice_and_layer_norm():
    x = rand(3, 4, 5, seed=14)
    t = OpTest(lambda x: L.slice(x, axes=[1, 2], starts=[1, -3], ends=[3, 100]), {"x": x})
    t.check_forward(x[:, 1:3, -3:])
    t.check_grad()
    scale, bias = rand(20, lo=0.5, hi=1.5, seed=15), rand(20, seed=16)
    ln = OpTest(lambda x: L.layer_norm(x, begin_norm_axis=1, epsilon=1e-5),
                {"x": x}, params={"w_0": scale, "b_0": bias})
    flat = x.reshape(3, 20)
    mu = flat.mean(axis=1, keepdims=True)
    var = flat.var(axis=1, keepdims=True)
    ln.check_forward(((flat - mu) / np.sqrt(var + 1e-5) * scale + bias).reshape(x.shape))
    ln.check_grad(rtol=1e-5)


def test_bad_layer_arguments_raise():
    main = fluid.Program()
    with fluid.program_guard(main, fluid.Program()):
        x = L.data("x", [3, 4], append_batch_size=False, dtype="float64")
        with pytest.raises(ValueError, match="begin_norm_axis"):
            L.layer_norm(x, begin_norm_axis=2)
        with pytest.raises(ValueError, match="num_or_sections"):
            L.split(x, 0)
        with pytest.raises(Exception, match="softmax"):
            L.softmax(x, axis=3)
