"""The image and volume layers of loom/layers/vision.py: forward against NumPy references and
gradients against finite differences (float64, tests/python/op_test.py), argument errors, and a
small CNN that trains through several of them."""
import numpy as np
import pytest

import loom as fluid
from op_test import OpTest

L = fluid.layers


def rand(*shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.RandomState(seed + len(shape)).uniform(lo, hi, shape).astype("float64")


def distinct(*shape, seed=0):
    """Distinct values (no ties for max pooling, even after a finite-difference nudge)."""
    n = int(np.prod(shape))
    return (np.random.RandomState(seed).permutation(n) * 0.01 - 0.3).reshape(shape)


def build_fails(build, shape, match, dtype="float32"):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = L.data("x", list(shape), append_batch_size=False, dtype=dtype)
        with pytest.raises((ValueError, TypeError, NotImplementedError, RuntimeError),
                           match=match):
            build(x)


# ---- pad2d -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("data_format", ["NCHW", "NHWC"])
def test_pad2d(mode, data_format):
    x = rand(2, 3, 4, 5, seed=1)
    pads = [1, 2, 3, 0]
    if data_format == "NHWC":
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        width = ((0, 0), (1, 2), (3, 0), (0, 0))
    else:
        width = ((0, 0), (0, 0), (1, 2), (3, 0))
    kw = {"constant_values": 0.5} if mode == "constant" else {}
    ref = np.pad(x, width, mode=mode, **kw)
    t = OpTest(lambda x: L.pad2d(x, pads, mode=mode, pad_value=0.5, data_format=data_format),
               {"x": x})
    t.check_forward(ref)
    t.check_grad()


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad2d_paddings_read_at_run_time(mode):
    x = rand(2, 3, 4, 5, seed=43)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = L.data("x", [2, 3, 4, 5], append_batch_size=False, dtype="float64",
                    stop_gradient=False)
        pads = L.data("pads", [4], append_batch_size=False, dtype="int32")
        out = L.pad2d(xv, pads, mode=mode, pad_value=0.5)
        assert list(out.shape) == [2, 3, -1, -1]
        loss = L.reduce_sum(L.square(out))
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    kw = {"constant_values": 0.5} if mode == "constant" else {}
    for p in ([1, 2, 3, 0], [0, 3, 1, 1]):
        got, dx = exe.run(main, feed={"x": x, "pads": np.array(p, dtype="int32")},
                          fetch_list=[out, "x@GRAD"], scope=scope)
        ref = np.pad(x, ((0, 0), (0, 0), (p[0], p[1]), (p[2], p[3])), mode=mode, **kw)
        np.testing.assert_array_equal(got, ref)
        # d sum(out^2) / dx: 2 out summed over the output pixels that read each input pixel.
        idx = np.pad(np.arange(x.size).reshape(x.shape), ((0, 0), (0, 0), (p[0], p[1]),
                                                          (p[2], p[3])), mode=mode,
                     **({"constant_values": -1} if mode == "constant" else {}))
        expect = np.zeros(x.size)
        np.add.at(expect, idx[idx >= 0], 2 * ref[idx >= 0])
        np.testing.assert_allclose(dx, expect.reshape(x.shape), rtol=1e-12)
    if mode == "reflect":
        with pytest.raises(Exception, match="below the extent 4"):
            exe.run(main, feed={"x": x, "pads": np.array([4, 0, 0, 0], dtype="int32")},
                    fetch_list=[out], scope=scope)


def test_pad2d_errors():
    build_fails(lambda x: L.pad2d(x, [1, 1, 1]), [1, 1, 3, 3], "pad2d: paddings")
    build_fails(lambda x: L.pad2d(x, [1, 1, 1, 1], mode="wrap"), [1, 1, 3, 3], "pad2d: mode")
    build_fails(lambda x: L.pad2d(x, [1, 1, 1, 1], data_format="CHWN"), [1, 1, 3, 3],
                "pad2d: data_format")
    build_fails(lambda x: L.pad2d(x, [-1, 0, 0, 0]), [1, 1, 3, 3], "pad2d: paddings")
    build_fails(lambda x: L.pad2d(x, [3, 0, 0, 0], mode="reflect"), [1, 1, 3, 3],
                "reflect mode needs paddings smaller")
    build_fails(lambda x: L.pad2d(x, [1, 1, 1, 1]), [3, 3, 3], "pad2d: input must be 4-D")


# ---- resizing --------------------------------------------------------------------------------

def axis_taps(n_in, n_out, linear, align_corners, align_mode):
    """Fluid's source pixels and weights along one axis: a list of [(index, weight), ...]."""
    if n_out > 1:
        ratio = np.float32((n_in - 1) / (n_out - 1)) if align_corners else \
            np.float32(n_in / n_out)
    else:
        ratio = np.float32(0.0)
    taps = []
    for o in range(n_out):
        if not linear:
            scaled = np.float32(ratio * np.float32(o))
            taps.append([(int(scaled + 0.5) if align_corners else int(scaled), 1.0)])
            continue
        half = align_mode == 0 and not align_corners
        centre = float(ratio) * (o + 0.5) - 0.5
        scaled = np.float32(ratio * np.float32(o))
        lo = max(int(centre) if half else int(scaled), 0)
        hi = min(lo + 1, n_in - 1)
        src = np.float32(max(np.float32(centre), 0.0)) if half else scaled
        frac = float(np.float32(src - np.float32(lo)))
        taps.append([(lo, float(np.float32(1.0) - np.float32(frac))), (hi, frac)])
    return taps


def resize_ref(x, out_sizes, linear, align_corners, align_mode):
    """x [N, C, *spatial] (2 or 3 spatial dims) resized with separable taps."""
    spatial = x.shape[2:]
    taps = [axis_taps(spatial[a], out_sizes[a], linear, align_corners, align_mode)
            for a in range(len(spatial))]
    out = x
    for a in range(len(spatial)):  # one axis at a time: the interpolation is separable
        ax = 2 + a
        moved = np.moveaxis(out, ax, -1)
        res = np.zeros(moved.shape[:-1] + (out_sizes[a],))
        for o, tl in enumerate(taps[a]):
            for i, w in tl:
                res[..., o] += moved[..., i] * w
        out = np.moveaxis(res, -1, ax)
    return out


@pytest.mark.parametrize("align_corners,align_mode", [(True, 1), (False, 0), (False, 1)])
@pytest.mark.parametrize("out_shape", [(5, 7), (3, 2)])
def test_resize_bilinear(align_corners, align_mode, out_shape):
    x = rand(2, 2, 3, 4, seed=2)
    t = OpTest(lambda x: L.resize_bilinear(x, out_shape=list(out_shape),
                                           align_corners=align_corners, align_mode=align_mode),
               {"x": x})
    t.check_forward(resize_ref(x, out_shape, True, align_corners, align_mode), rtol=1e-6,
                    atol=1e-7)
    t.check_grad()


def test_resize_bilinear_known_values_and_scale():
    x = np.array([[[[0.0, 2.0], [4.0, 6.0]]]])
    t = OpTest(lambda x: L.resize_bilinear(x, out_shape=[3, 3]), {"x": x})
    t.check_forward(np.array([[[[0, 1, 2], [2, 3, 4], [4, 5, 6]]]], dtype="float64"))
    s = OpTest(lambda x: L.image_resize(x, scale=1.5), {"x": x})
    s.check_forward(np.array([[[[0, 1, 2], [2, 3, 4], [4, 5, 6]]]], dtype="float64"))


def test_resize_bilinear_nhwc():
    x = rand(2, 3, 4, 2, seed=3)  # NHWC
    ref = resize_ref(x.transpose(0, 3, 1, 2), (5, 3), True, False, 0).transpose(0, 2, 3, 1)
    t = OpTest(lambda x: L.resize_bilinear(x, out_shape=[5, 3], align_corners=False,
                                           align_mode=0, data_format="NHWC"), {"x": x})
    t.check_forward(ref, rtol=1e-6, atol=1e-7)
    t.check_grad()


@pytest.mark.parametrize("align_corners", [True, False])
def test_resize_nearest(align_corners):
    x = rand(2, 2, 3, 4, seed=4)
    t = OpTest(lambda x: L.resize_nearest(x, out_shape=[5, 6], align_corners=align_corners),
               {"x": x})
    t.check_forward(resize_ref(x, (5, 6), False, align_corners, 1))
    t.check_grad()
    # Downsampling by 2 without align_corners picks every other pixel.
    d = OpTest(lambda x: L.resize_nearest(x, scale=0.5, align_corners=False),
               {"x": rand(1, 1, 4, 4, seed=5)})
    d.check_forward(rand(1, 1, 4, 4, seed=5)[:, :, ::2, ::2])


@pytest.mark.parametrize("align_corners,align_mode", [(True, 1), (False, 0)])
def test_resize_trilinear(align_corners, align_mode):
    x = rand(1, 2, 2, 3, 2, seed=6)
    t = OpTest(lambda x: L.resize_trilinear(x, out_shape=[3, 4, 3], align_corners=align_corners,
                                            align_mode=align_mode), {"x": x})
    t.check_forward(resize_ref(x, (3, 4, 3), True, align_corners, align_mode), rtol=1e-6,
                    atol=1e-7)
    t.check_grad()


@pytest.mark.parametrize("how", ["out_shape", "actual_shape"])
def test_resize_to_a_size_read_at_run_time(how):
    x = rand(2, 2, 3, 4, seed=42)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = L.data("x", [2, 2, 3, 4], append_batch_size=False, dtype="float64",
                    stop_gradient=False)
        size = L.data("size", [2], append_batch_size=False, dtype="int32")
        if how == "out_shape":
            out = L.resize_bilinear(xv, out_shape=size, align_corners=False, align_mode=0)
            assert list(out.shape) == [2, 2, -1, -1]
        else:
            out = L.resize_bilinear(xv, out_shape=[3, 3], actual_shape=size,
                                    align_corners=False, align_mode=0)
            assert list(out.shape) == [2, 2, 3, 3]
        loss = L.reduce_sum(L.square(out))
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    for hw in ([5, 7], [2, 3]):
        got, dx = exe.run(main, feed={"x": x, "size": np.array(hw, dtype="int32")},
                          fetch_list=[out, "x@GRAD"], scope=scope)
        ref = resize_ref(x, tuple(hw), True, False, 0)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-7)
        # d sum(out^2) / dx = the adjoint of the resize applied to 2 out, basis vector by vector.
        expect = np.zeros_like(x)
        for idx in np.ndindex(*x.shape):
            e = np.zeros_like(x)
            e[idx] = 1.0
            expect[idx] = (2 * ref * resize_ref(e, tuple(hw), True, False, 0)).sum()
        np.testing.assert_allclose(dx, expect, rtol=1e-6, atol=1e-7)


def test_resize_size_variable_errors():
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = L.data("x", [1, 1, 4, 4], append_batch_size=False)
        fsize = L.data("fsize", [2], append_batch_size=False, dtype="float32")
        isize = L.data("isize", [3], append_batch_size=False, dtype="int32")
        with pytest.raises(ValueError, match="out_shape must be an int32 Variable of shape"):
            L.resize_bilinear(x, out_shape=fsize)
        with pytest.raises(ValueError, match="actual_shape must be an int32 Variable of shape"):
            L.resize_bilinear(x, [2, 2], actual_shape=isize)
        with pytest.raises(TypeError, match="actual_shape must be a Variable"):
            L.resize_bilinear(x, [2, 2], actual_shape=[3, 3])
        with pytest.raises(ValueError, match="pad2d: paddings must be an int32 Variable"):
            L.pad2d(x, fsize)
        size = L.data("size", [2], append_batch_size=False, dtype="int32")
        out = L.resize_nearest(x, out_shape=size)
    exe = fluid.Executor(fluid.CPUPlace())
    with pytest.raises(Exception, match="OutSize must be positive"):
        exe.run(main, feed={"x": np.zeros((1, 1, 4, 4), "float32"),
                            "size": np.array([0, 2], dtype="int32")}, fetch_list=[out])


def test_image_resize_takes_either_spelling_of_the_layout():
    x = rand(1, 2, 2, 3, 2, seed=41)
    ref = resize_ref(x, (3, 4, 3), True, True, 1)
    t = OpTest(lambda x: L.image_resize(x, [3, 4, 3], resample="TRILINEAR"), {"x": x})
    t.check_forward(ref, rtol=1e-6, atol=1e-7)
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1))
    h = OpTest(lambda x: L.resize_trilinear(x, [3, 4, 3], data_format="NHWC"), {"x": xl})
    h.check_forward(ref.transpose(0, 2, 3, 4, 1), rtol=1e-6, atol=1e-7)


def test_image_resize_short():
    x = rand(1, 2, 4, 6, seed=7)
    t = OpTest(lambda x: L.image_resize_short(x, 2), {"x": x})
    (out,) = t.forward()
    assert out.shape == (1, 2, 2, 3)
    t.check_forward(resize_ref(x, (2, 3), True, True, 1), rtol=1e-6, atol=1e-7)


def test_resize_errors():
    shape = [1, 1, 4, 4]
    build_fails(lambda x: L.image_resize(x), shape, "give out_shape or scale")
    build_fails(lambda x: L.image_resize(x, [2, 2], resample="BICUBIC"), shape, "resample")
    build_fails(lambda x: L.image_resize(x, [2, 2, 2]), shape, "out_shape must be a list of 2")
    build_fails(lambda x: L.resize_bilinear(x, [2, 2], actual_shape=x), shape,
                "actual_shape must be an int32 Variable")
    build_fails(lambda x: L.resize_bilinear(x, [2, 2], align_mode=2), shape, "align_mode")
    build_fails(lambda x: L.resize_bilinear(x, scale=-1.0), shape, "scale must be > 0")
    build_fails(lambda x: L.resize_bilinear(x, [2, 2], data_format="CHWN"), shape,
                "data_format")
    build_fails(lambda x: L.resize_trilinear(x, [2, 2, 2]), shape, "TRILINEAR needs a 5-D")
    build_fails(lambda x: L.resize_nearest(x, scale=0.1), shape, "empty")


# ---- pooling ---------------------------------------------------------------------------------

def adaptive_ref(x, size, pool_type):
    spatial = x.shape[2:]
    out = np.zeros(x.shape[:2] + tuple(size))
    for idx in np.ndindex(*size):
        sl = tuple(slice(i * n // s, -(-(i + 1) * n // s)) for i, n, s in zip(idx, spatial, size))
        win = x[(Ellipsis,) + sl].reshape(x.shape[:2] + (-1,))
        out[(Ellipsis,) + idx] = win.max(-1) if pool_type == "max" else win.mean(-1)
    return out


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_adaptive_pool2d(pool_type):
    x = distinct(2, 2, 5, 7, seed=8)
    t = OpTest(lambda x: L.adaptive_pool2d(x, [3, 4], pool_type), {"x": x})
    t.check_forward(adaptive_ref(x, (3, 4), pool_type))
    t.check_grad(eps=1e-4)


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_adaptive_pool3d(pool_type):
    x = distinct(1, 2, 3, 5, 4, seed=9)
    t = OpTest(lambda x: L.adaptive_pool3d(x, [2, 3, 2], pool_type), {"x": x})
    t.check_forward(adaptive_ref(x, (2, 3, 2), pool_type))
    t.check_grad(eps=1e-4)


@pytest.mark.parametrize("rank", [2, 3])
def test_adaptive_pool_require_index(rank):
    shape = (2, 2, 5, 7) if rank == 2 else (1, 2, 3, 5, 4)
    size = [3, 4] if rank == 2 else [2, 3, 2]
    x = distinct(*shape, seed=35)
    pool = L.adaptive_pool2d if rank == 2 else L.adaptive_pool3d
    held = {}

    def build(x):
        out, held["mask"] = pool(x, size, require_index=True)
        return out

    t = OpTest(build, {"x": x})
    out, mask = t._run([t.outs[0], held["mask"]])
    np.testing.assert_array_equal(out, adaptive_ref(x, size, "max"))
    assert mask.dtype == np.int32
    flat = x.reshape(shape[:2] + (-1,))
    picked = np.take_along_axis(flat, mask.reshape(shape[:2] + (-1,)).astype(np.int64), -1)
    np.testing.assert_array_equal(picked.reshape(out.shape), out)
    t.check_grad(eps=1e-4)


def pool3d_ref(x, k, s, p, pool_type, exclusive=True, ceil_mode=False, p_after=None):
    n, c, *sp = x.shape
    p_after = p if p_after is None else p_after
    outs = []
    for a in range(3):
        span = sp[a] + p[a] + p_after[a] - k[a]
        outs.append((-(-span // s[a]) if ceil_mode else span // s[a]) + 1)
    out = np.zeros((n, c) + tuple(outs))
    for idx in np.ndindex(*outs):
        lo = [i * s[a] - p[a] for a, i in enumerate(idx)]
        sl = tuple(slice(max(lo[a], 0), min(lo[a] + k[a], sp[a])) for a in range(3))
        win = x[(Ellipsis,) + sl].reshape(n, c, -1)
        if pool_type == "max":
            out[(Ellipsis,) + idx] = win.max(-1)
        else:
            out[(Ellipsis,) + idx] = win.sum(-1) / (win.shape[-1] if exclusive else np.prod(k))
    return out


@pytest.mark.parametrize("pool_type", ["max", "avg"])
@pytest.mark.parametrize("exclusive", [True, False])
def test_pool3d(pool_type, exclusive):
    x = distinct(2, 2, 4, 5, 4, seed=10)
    t = OpTest(lambda x: L.pool3d(x, [2, 3, 2], pool_type, [2, 1, 2], [1, 1, 0],
                                  exclusive=exclusive), {"x": x})
    t.check_forward(pool3d_ref(x, [2, 3, 2], [2, 1, 2], [1, 1, 0], pool_type, exclusive))
    t.check_grad(eps=1e-4)


def test_pool3d_global_ceil_and_ndhwc():
    x = distinct(1, 2, 3, 4, 5, seed=11)
    g = OpTest(lambda x: L.pool3d(x, pool_type="avg", global_pooling=True), {"x": x})
    g.check_forward(x.mean(axis=(2, 3, 4), keepdims=True))
    c = OpTest(lambda x: L.pool3d(x, 2, "max", 2, ceil_mode=True), {"x": x})
    c.check_forward(pool3d_ref(x, [2] * 3, [2] * 3, [0] * 3, "max", ceil_mode=True))
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 4, 1))
    h = OpTest(lambda x: L.pool3d(x, 2, "avg", 1, data_format="NDHWC"), {"x": xl})
    h.check_forward(pool3d_ref(x, [2] * 3, [1] * 3, [0] * 3, "avg").transpose(0, 2, 3, 4, 1))
    h.check_grad()


@pytest.mark.parametrize("pool_type", ["max", "avg"])
def test_pool3d_asymmetric_and_same_padding(pool_type):
    x = distinct(1, 2, 5, 4, 6, seed=36)
    t = OpTest(lambda x: L.pool3d(x, [2, 3, 2], pool_type, [2, 1, 2], [1, 0, 0, 2, 1, 1],
                                  exclusive=False), {"x": x})
    t.check_forward(pool3d_ref(x, [2, 3, 2], [2, 1, 2], [1, 0, 1], pool_type, False,
                               p_after=[0, 2, 1]))
    t.check_grad(eps=1e-4)
    # 'SAME': out = ceil(in / stride), total padding (out - 1) * stride + k - in (at least 0):
    # D 5 -> 3, total 2 (1, 1); H 4 -> 4, total 2 (1, 1); W 6 -> 2, total -1 (0, 0).
    same = OpTest(lambda x: L.pool3d(x, [3, 3, 2], pool_type, [2, 1, 3], "SAME"), {"x": x})
    ref = pool3d_ref(x, [3, 3, 2], [2, 1, 3], [1, 1, 0], pool_type, p_after=[1, 1, 0])
    assert ref.shape[2:] == (3, 4, 2)
    same.check_forward(ref)
    same.check_grad(eps=1e-4)


def test_pool_errors():
    build_fails(lambda x: L.adaptive_pool2d(x, [2, 2], "avg", require_index=True),
                [1, 1, 4, 4], "require_index=True needs pool_type 'max'")
    build_fails(lambda x: L.adaptive_pool2d(x, [2, 2], "min"), [1, 1, 4, 4], "pool_type")
    build_fails(lambda x: L.adaptive_pool2d(x, [2, 2, 2]), [1, 1, 4, 4], "pool_size")
    build_fails(lambda x: L.adaptive_pool3d(x, 2), [1, 1, 4, 4], "input must be 5-D")
    build_fails(lambda x: L.pool3d(x, 2), [1, 1, 4, 4], "input must be 5-D")
    build_fails(lambda x: L.pool3d(x, 5), [1, 1, 4, 4, 4], "empty")
    build_fails(lambda x: L.pool3d(x, 2, pool_padding="FULL"), [1, 1, 4, 4, 4],
                "pool3d: padding must be")
    build_fails(lambda x: L.pool3d(x, 2, pool_padding="VALID", ceil_mode=True), [1, 1, 4, 4, 4],
                "ceil_mode")
    build_fails(lambda x: L.pool3d(x, 2, pool_padding=[2, 0, 0, 0, 0, 0]), [1, 1, 4, 4, 4],
                "must be smaller than ksize")
    build_fails(lambda x: L.pool3d(x, 2, data_format="NHWC"), [1, 1, 4, 4, 4], "data_format")


# ---- 3-D convolutions ------------------------------------------------------------------------

def conv3d_ref(x, w, s, p, d, groups):
    n, c = x.shape[:2]
    m, cg = w.shape[:2]
    k = w.shape[2:]
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple((q, q) for q in p))
    outs = [(x.shape[2 + a] + 2 * p[a] - d[a] * (k[a] - 1) - 1) // s[a] + 1 for a in range(3)]
    out = np.zeros((n, m) + tuple(outs))
    mg = m // groups
    for o in range(m):
        g = o // mg
        for idx in np.ndindex(*outs):
            sl = tuple(slice(idx[a] * s[a], idx[a] * s[a] + d[a] * (k[a] - 1) + 1, d[a])
                       for a in range(3))
            patch = xp[(slice(None), slice(g * cg, (g + 1) * cg)) + sl]
            out[(slice(None), o) + idx] = (patch * w[o]).sum(axis=(1, 2, 3, 4))
    return out


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (1, 1, 2, 1)])
def test_conv3d(stride, pad, dil, groups):
    x = rand(2, 2, 4, 5, 4, seed=12)
    w = rand(4, 2 // groups, 2, 3, 2, seed=13)
    b = rand(4, seed=14)
    t = OpTest(lambda x: L.conv3d(x, 4, [2, 3, 2], stride=stride, padding=pad, dilation=dil,
                                  groups=groups), {"x": x}, params={"w_0": w, "b_0": b})
    ref = conv3d_ref(x, w, [stride] * 3, [pad] * 3, [dil] * 3, groups) + b.reshape(1, 4, 1, 1, 1)
    t.check_forward(ref, rtol=1e-9, atol=1e-10)
    t.check_grad()


def test_conv3d_asymmetric_same_and_pair_padding():
    x = rand(1, 2, 4, 5, 3, seed=37)
    w = rand(3, 2, 2, 3, 2, seed=38)
    pads = [1, 0, 0, 2, 1, 1]  # [front, back, top, bottom, left, right]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 2), (1, 1)))
    ref = conv3d_ref(xp, w, [2, 1, 1], [0] * 3, [1] * 3, 1)
    for padding in (pads, [[0, 0], [0, 0], [1, 0], [0, 2], [1, 1]]):
        t = OpTest(lambda x: L.conv3d(x, 3, [2, 3, 2], stride=[2, 1, 1], padding=padding,
                                      bias_attr=False), {"x": x}, params={"w_0": w})
        t.check_forward(ref, rtol=1e-9, atol=1e-10)
    t.check_grad()
    # 'SAME' (dilation forced to 1): out = ceil(in / stride), the odd padding after.
    s = OpTest(lambda x: L.conv3d(x, 3, [2, 3, 2], stride=[2, 1, 1], padding="SAME",
                                  dilation=2, bias_attr=False), {"x": x}, params={"w_0": w})
    xs = np.pad(x, ((0, 0), (0, 0), (0, 0), (1, 1), (0, 1)))
    ref = conv3d_ref(xs, w, [2, 1, 1], [0] * 3, [1] * 3, 1)
    assert ref.shape[2:] == (2, 5, 3)
    s.check_forward(ref, rtol=1e-9, atol=1e-10)
    s.check_grad()


def test_conv3d_transpose_asymmetric_padding():
    x = rand(1, 2, 2, 3, 2, seed=39)
    w = rand(2, 3, 2, 2, 3, seed=40)
    t = OpTest(lambda x: L.conv3d_transpose(x, 3, filter_size=[2, 2, 3], stride=2,
                                            padding=[1, 0, 0, 1, 1, 2], bias_attr=False),
               {"x": x}, params={"w_0": w})
    full = conv3d_transpose_ref(x, w, [2] * 3, [0] * 3, [1] * 3, 1)
    t.check_forward(full[:, :, 1:, :-1, 1:-2], rtol=1e-9, atol=1e-10)
    t.check_grad()


def test_conv3d_ndhwc():
    x = rand(1, 3, 4, 3, 2, seed=15)  # NDHWC
    w = rand(2, 2, 2, 2, 2, seed=16)
    t = OpTest(lambda x: L.conv3d(x, 2, 2, data_format="NDHWC", bias_attr=False), {"x": x},
               params={"w_0": w})
    ref = conv3d_ref(x.transpose(0, 4, 1, 2, 3), w, [1] * 3, [0] * 3, [1] * 3, 1)
    t.check_forward(ref.transpose(0, 2, 3, 4, 1), rtol=1e-9, atol=1e-10)


def conv3d_transpose_ref(x, w, s, p, d, groups, out_size=None):
    n, c = x.shape[:2]
    mg = w.shape[1]
    k = w.shape[2:]
    full = [(x.shape[2 + a] - 1) * s[a] + d[a] * (k[a] - 1) + 1 for a in range(3)]
    size = [full[a] - 2 * p[a] for a in range(3)] if out_size is None else out_size
    big = np.zeros((n, mg * groups) + tuple(max(full[a], size[a] + 2 * p[a]) for a in range(3)))
    cg = c // groups
    for ci in range(c):
        g = ci // cg
        for idx in np.ndindex(*x.shape[2:]):
            for kk in np.ndindex(*k):
                pos = tuple(idx[a] * s[a] + kk[a] * d[a] for a in range(3))
                big[(slice(None), slice(g * mg, (g + 1) * mg)) + pos] += \
                    x[(slice(None), ci) + idx][:, None] * w[(ci, slice(None)) + kk]
    return big[(Ellipsis,) + tuple(slice(p[a], p[a] + size[a]) for a in range(3))]


@pytest.mark.parametrize("stride,pad,dil,groups", [(1, 0, 1, 1), (2, 1, 1, 2), (1, 0, 2, 1)])
def test_conv3d_transpose(stride, pad, dil, groups):
    x = rand(2, 2, 3, 2, 3, seed=17)
    w = rand(2, 4 // groups, 2, 2, 3, seed=18)
    t = OpTest(lambda x: L.conv3d_transpose(x, 4, filter_size=[2, 2, 3], stride=stride,
                                            padding=pad, dilation=dil, groups=groups,
                                            bias_attr=False), {"x": x}, params={"w_0": w})
    t.check_forward(conv3d_transpose_ref(x, w, [stride] * 3, [pad] * 3, [dil] * 3, groups),
                    rtol=1e-9, atol=1e-10)
    t.check_grad()


def test_conv3d_transpose_output_size():
    x = rand(1, 2, 2, 2, 2, seed=19)
    w = rand(2, 3, 2, 2, 2, seed=20)
    t = OpTest(lambda x: L.conv3d_transpose(x, 3, output_size=[5, 4, 5], filter_size=2,
                                            stride=2, bias_attr=False), {"x": x},
               params={"w_0": w})
    t.check_forward(conv3d_transpose_ref(x, w, [2] * 3, [0] * 3, [1] * 3, 1, [5, 4, 5]),
                    rtol=1e-9, atol=1e-10)
    t.check_grad()


def test_conv3d_errors():
    build_fails(lambda x: L.conv3d(x, 4, 3), [1, 2, 4, 4], "conv3d: input must be 5-D")
    build_fails(lambda x: L.conv3d(x, 3, 2, groups=2), [1, 2, 4, 4, 4], "divisible by groups")
    build_fails(lambda x: L.conv3d(x, 2, [2, 2]), [1, 2, 4, 4, 4], "filter_size")
    build_fails(lambda x: L.conv3d(x, 2, 5), [1, 2, 4, 4, 4], "empty")
    build_fails(lambda x: L.conv3d(x, 2, 2, act="nope"), [1, 2, 4, 4, 4], "activation")
    build_fails(lambda x: L.conv3d_transpose(x, 2), [1, 2, 4, 4, 4],
                "give filter_size or output_size")
    build_fails(lambda x: L.conv3d_transpose(x, 2, output_size=[9, 9, 9], filter_size=2),
                [1, 2, 4, 4, 4], "output_size")


# ---- channel rearrangements ------------------------------------------------------------------

def test_affine_channel():
    x = rand(2, 3, 2, 2, seed=21)
    scale, bias = rand(3, seed=22), rand(3, seed=23)
    t = OpTest(lambda x, s, b: L.affine_channel(x, s, b), {"x": x, "s": scale, "b": bias})
    t.check_forward(x * scale.reshape(1, 3, 1, 1) + bias.reshape(1, 3, 1, 1))
    t.check_grad()
    xl = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
    h = OpTest(lambda x, s, b: L.affine_channel(x, s, b, data_layout="NHWC", act="relu"),
               {"x": xl, "s": scale, "b": bias})
    h.check_forward(np.maximum(xl * scale + bias, 0))


def space_to_depth_ref(x, b):
    """Fluid's index rule, element by element."""
    n, c, h, w = x.shape
    out = np.zeros(x.size)
    oc = c // (b * b)
    for idx in np.ndindex(*x.shape):
        bb, k, j, i = idx
        c2, offset = k % oc, k // oc
        w2, h2 = i * b + offset % b, j * b + offset // b
        out[w2 + w * b * (h2 + h * b * (c2 + oc * bb))] = x[idx]
    return out.reshape(n, c * b * b, h // b, w // b)


def test_space_to_depth():
    x = rand(2, 8, 4, 6, seed=24)
    t = OpTest(lambda x: L.space_to_depth(x, 2), {"x": x})
    t.check_forward(space_to_depth_ref(x, 2))
    t.check_grad()


def test_shuffle_channel():
    x = rand(2, 6, 2, 3, seed=25)
    t = OpTest(lambda x: L.shuffle_channel(x, 3), {"x": x})
    t.check_forward(x.reshape(2, 3, 2, 2, 3).transpose(0, 2, 1, 3, 4).reshape(2, 6, 2, 3))
    t.check_grad()


def temporal_shift_ref(x, seg_num, ratio):
    nt, c, h, w = x.shape
    y = x.reshape(nt // seg_num, seg_num, c, h, w)
    out = np.zeros_like(y)
    c1, c2 = int(c * ratio), int(c * 2 * ratio)
    for t in range(seg_num):
        for ch in range(c):
            src = t - 1 if ch < c1 else t + 1 if ch < c2 else t
            if 0 <= src < seg_num:
                out[:, t, ch] = y[:, src, ch]
    return out.reshape(x.shape)


@pytest.mark.parametrize("ratio", [0.25, 0.2, 0.5])
def test_temporal_shift(ratio):
    x = rand(6, 4, 2, 2, seed=26)
    t = OpTest(lambda x: L.temporal_shift(x, 3, ratio), {"x": x})
    t.check_forward(temporal_shift_ref(x, 3, ratio))
    t.check_grad()


def unfold_ref(x, k, s, p, d):
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[2]), (p[1], p[3])))
    oh = (h + p[0] + p[2] - (d[0] * (k[0] - 1) + 1)) // s[0] + 1
    ow = (w + p[1] + p[3] - (d[1] * (k[1] - 1) + 1)) // s[1] + 1
    out = np.zeros((n, c * k[0] * k[1], oh * ow))
    for ch in range(c):
        for ki in range(k[0]):
            for kj in range(k[1]):
                row = (ch * k[0] + ki) * k[1] + kj
                for i in range(oh):
                    for j in range(ow):
                        out[:, row, i * ow + j] = xp[:, ch, i * s[0] + ki * d[0],
                                                     j * s[1] + kj * d[1]]
    return out


@pytest.mark.parametrize("k,s,p,d", [([2, 2], 1, 0, 1), ([2, 3], [2, 1], [1, 0, 0, 1], 1),
                                     ([2, 2], 1, 1, 2)])
def test_unfold(k, s, p, d):
    x = rand(2, 2, 4, 5, seed=27)
    t = OpTest(lambda x: L.unfold(x, k, s, p, d), {"x": x})
    s2 = [s, s] if isinstance(s, int) else s
    p4 = p if isinstance(p, list) else [p] * 4
    t.check_forward(unfold_ref(x, k, s2, p4, [d, d]))
    t.check_grad()


def test_rearrangement_errors():
    build_fails(lambda x: L.space_to_depth(x, 2), [1, 6, 4, 4], "space_to_depth: channels 6")
    build_fails(lambda x: L.space_to_depth(x, 2), [1, 4, 4], "space_to_depth: x must be 4-D")
    build_fails(lambda x: L.shuffle_channel(x, 4), [1, 6, 2, 2], "shuffle_channel: channels 6")
    build_fails(lambda x: L.temporal_shift(x, 4), [6, 4, 2, 2], "temporal_shift: the batch 6")
    build_fails(lambda x: L.temporal_shift(x, 3, 0.7), [6, 4, 2, 2], "shift_ratio")
    build_fails(lambda x: L.affine_channel(x, None, None), [1, 3, 2, 2],
                "affine_channel: scale must be a Variable")
    build_fails(lambda x: L.unfold(x, [2, 2, 2]), [1, 3, 4, 4], "unfold: kernel_sizes")
    build_fails(lambda x: L.unfold(x, [3, 3], dilations=2), [1, 3, 4, 4],
                "unfold: the padded input")


# ---- spatial transformer and cropping --------------------------------------------------------

def affine_grid_ref(theta, h, w):
    xs, ys = np.linspace(-1, 1, w), np.linspace(-1, 1, h)
    base = np.stack([np.tile(xs, (h, 1)), np.tile(ys[:, None], (1, w)), np.ones((h, w))], -1)
    return np.einsum("hwj,nkj->nhwk", base, theta)


def test_affine_grid():
    theta = rand(2, 2, 3, seed=28)
    t = OpTest(lambda th: L.affine_grid(th, [2, 3, 4, 5]), {"th": theta})
    t.check_forward(affine_grid_ref(theta, 4, 5), rtol=1e-12, atol=1e-12)
    t.check_grad()


def test_affine_grid_shape_read_at_run_time():
    theta = rand(2, 2, 3, seed=44)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        th = L.data("th", [2, 2, 3], append_batch_size=False, dtype="float64",
                    stop_gradient=False)
        shape = L.data("shape", [4], append_batch_size=False, dtype="int32")
        grid = L.affine_grid(th, shape)
        assert list(grid.shape) == [2, -1, -1, 2]
        loss = L.reduce_sum(grid)
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    for h, w in ((4, 5), (3, 2)):
        got, dth = exe.run(main, feed={"th": theta, "shape": np.array([2, 1, h, w], "int32")},
                           fetch_list=[grid, "th@GRAD"], scope=scope)
        np.testing.assert_allclose(got, affine_grid_ref(theta, h, w), rtol=1e-12, atol=1e-12)
        xs, ys = np.linspace(-1, 1, w), np.linspace(-1, 1, h)
        row = [h * xs.sum(), w * ys.sum(), h * w]  # d sum / d theta[n, k, :]
        np.testing.assert_allclose(dth, np.tile(row, (2, 2, 1)), rtol=1e-12, atol=1e-12)
    with pytest.raises(Exception, match="at least 2"):
        exe.run(main, feed={"th": theta, "shape": np.array([2, 1, 1, 3], "int32")},
                fetch_list=[grid], scope=scope)


def grid_sampler_ref(x, grid):
    n, c, h, w = x.shape
    ho, wo = grid.shape[1:3]
    out = np.zeros((n, c, ho, wo))
    for b, i, j in np.ndindex(n, ho, wo):
        px = (grid[b, i, j, 0] + 1) / 2 * (w - 1)
        py = (grid[b, i, j, 1] + 1) / 2 * (h - 1)
        x0, y0 = int(np.floor(px)), int(np.floor(py))
        for yy, xx in ((y0, x0), (y0, x0 + 1), (y0 + 1, x0), (y0 + 1, x0 + 1)):
            if 0 <= yy < h and 0 <= xx < w:
                out[b, :, i, j] += x[b, :, yy, xx] * (1 - abs(px - xx)) * (1 - abs(py - yy))
    return out


def test_grid_sampler():
    x = rand(2, 2, 3, 4, seed=29)
    grid = rand(2, 3, 2, 2, lo=-1.2, hi=1.2, seed=30)
    t = OpTest(lambda x, g: L.grid_sampler(x, g), {"x": x, "g": grid})
    t.check_forward(grid_sampler_ref(x, grid), rtol=1e-10, atol=1e-12)
    t.check_grad()


def test_affine_grid_then_grid_sampler_identity():
    # The identity transform samples every pixel exactly.
    x = rand(1, 2, 3, 4, seed=31)
    theta = np.array([[[1.0, 0, 0], [0, 1.0, 0]]])
    t = OpTest(lambda x, th: L.grid_sampler(x, L.affine_grid(th, [1, 2, 3, 4])),
               {"x": x, "th": theta})
    t.check_forward(x, rtol=1e-12, atol=1e-12)


def test_random_crop():
    x = np.arange(2 * 3 * 5 * 6, dtype="float32").reshape(2, 3, 5, 6)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = L.data("x", [2, 3, 5, 6], append_batch_size=False)
        out = L.random_crop(xv, [3, 4], seed=7)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    runs = [exe.run(main, feed={"x": x}, fetch_list=[out], scope=scope)[0] for _ in range(4)]
    offsets = set()
    for got in runs:
        assert got.shape == (2, 3, 3, 4)
        for b, c in np.ndindex(2, 3):
            a0, b0 = divmod(int(got[b, c, 0, 0] - x[b, c, 0, 0]), 6)
            np.testing.assert_array_equal(got[b, c], x[b, c, a0:a0 + 3, b0:b0 + 4])
            offsets.add((a0, b0))
    assert len(offsets) > 1  # instances and runs draw their own offsets
    # The same seed from a fresh start repeats the crops.
    scope2 = fluid.core.Scope()
    exe.run(startup, scope=scope2)
    again = exe.run(main, feed={"x": x}, fetch_list=[out], scope=scope2)[0]
    np.testing.assert_array_equal(again, runs[0])


def test_transformer_and_crop_errors():
    build_fails(lambda t: L.affine_grid(t, [1, 1, 4]), [1, 2, 3], "affine_grid: out_shape")
    build_fails(lambda t: L.affine_grid(t, [1, 1, 4, 4]), [1, 3, 3], "affine_grid: theta")
    build_fails(lambda t: L.affine_grid(t, [1, 1, 1, 4]), [1, 2, 3], "at least 2")
    build_fails(lambda x: L.grid_sampler(x, x), [1, 2, 3, 4], "grid_sampler: grid")
    build_fails(lambda x: L.random_crop(x, [6, 2]), [1, 5, 6], "random_crop: shape")
    build_fails(lambda x: L.random_crop(x, [2], seed="s"), [1, 5, 6], "random_crop: seed")


def test_layers_take_an_unknown_batch():
    rng = np.random.RandomState(32)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = L.data("x", [8, 4, 6])
        v = L.data("v", [2, 4, 4, 4])
        outs = [L.space_to_depth(x, 2), L.temporal_shift(x, 2), L.temporal_shift(x, 1),
                L.unfold(x, [2, 2]), L.shuffle_channel(x, 2), L.resize_nearest(x, scale=2.0),
                L.adaptive_pool2d(x, 3, "avg"), L.pad2d(x, [1, 1, 1, 1], "edge"),
                L.conv3d(v, 2, 3), L.conv3d_transpose(v, 2, filter_size=2), L.pool3d(v, 2),
                L.adaptive_pool3d(v, 2), L.resize_trilinear(v, [3, 3, 3])]
    assert all(o.shape[0] == -1 for o in outs)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    xv = rng.rand(4, 8, 4, 6).astype("float32")
    got = exe.run(main, feed={"x": xv, "v": rng.rand(4, 2, 4, 4, 4).astype("float32")},
                  fetch_list=outs, scope=scope)
    assert [g.shape[0] for g in got] == [4] * 13
    np.testing.assert_array_equal(got[0], space_to_depth_ref(xv, 2))
    np.testing.assert_array_equal(got[1], temporal_shift_ref(xv, 2, 0.25))
    np.testing.assert_array_equal(got[2], temporal_shift_ref(xv, 1, 0.25))


# ---- CUDA kernels against the CPU ones -------------------------------------------------------

CUDA_CASES = {
    "pad2d_reflect": (lambda x: L.pad2d(x, [1, 2, 2, 1], mode="reflect"), (2, 3, 5, 6)),
    "pad2d_edge_nhwc": (lambda x: L.pad2d(x, [1, 0, 2, 1], "edge", data_format="NHWC"),
                        (2, 5, 6, 3)),
    "pad2d_constant": (lambda x: L.pad2d(x, [2, 1, 0, 3], pad_value=0.5), (2, 3, 4, 4)),
    "bilinear_half_pixel": (lambda x: L.resize_bilinear(x, [7, 9], align_corners=False,
                                                        align_mode=0), (2, 3, 4, 5)),
    "bilinear_nhwc": (lambda x: L.resize_bilinear(x, [3, 7], data_format="NHWC"), (2, 4, 5, 3)),
    "nearest": (lambda x: L.resize_nearest(x, [7, 3]), (2, 3, 4, 5)),
    "trilinear": (lambda x: L.resize_trilinear(x, [3, 5, 4], align_corners=False),
                  (1, 2, 2, 3, 3)),
    "pool3d_max": (lambda x: L.pool3d(x, [2, 3, 2], "max", [1, 2, 1], [1, 1, 0]),
                   (2, 2, 4, 5, 4)),
    "pool3d_avg_ceil": (lambda x: L.pool3d(x, 2, "avg", 2, ceil_mode=True, exclusive=False),
                        (2, 2, 3, 5, 4)),
    "adaptive_pool2d_avg": (lambda x: L.adaptive_pool2d(x, [3, 4], "avg"), (2, 3, 5, 7)),
    "adaptive_pool3d_max": (lambda x: L.adaptive_pool3d(x, [2, 3, 2], "max"), (1, 2, 3, 5, 4)),
    "conv3d_groups": (lambda x: L.conv3d(x, 4, [2, 3, 2], stride=2, padding=1, groups=2),
                      (2, 4, 5, 6, 5)),
    "conv3d_dilated": (lambda x: L.conv3d(x, 3, 2, padding=1, dilation=2), (2, 2, 4, 4, 5)),
    "conv3d_transpose": (lambda x: L.conv3d_transpose(x, 4, filter_size=[2, 3, 2], stride=2,
                                                      padding=1, groups=2), (2, 4, 3, 3, 3)),
    "conv3d_asymmetric": (lambda x: L.conv3d(x, 2, [2, 3, 2], padding=[1, 0, 0, 2, 1, 1]),
                          (2, 2, 4, 5, 3)),
    "conv3d_transpose_asymmetric": (lambda x: L.conv3d_transpose(
        x, 3, filter_size=[2, 2, 3], stride=2, padding=[1, 0, 0, 1, 1, 2]), (1, 2, 2, 3, 2)),
    "pool3d_same": (lambda x: L.pool3d(x, 3, "avg", 2, "SAME"), (1, 2, 5, 4, 6)),
    "affine_grid": (lambda x: L.affine_grid(x, [2, 1, 4, 5]), (2, 2, 3)),
    # The grid is read from x's first two channels, so both gradient paths reach x.
    "grid_sampler": (lambda x: L.grid_sampler(x, L.transpose(
        L.slice(x, axes=[1], starts=[0], ends=[2]), [0, 2, 3, 1])), (2, 3, 4, 5)),
}


@pytest.mark.parametrize("case", sorted(CUDA_CASES))
def test_cuda_kernels_match_cpu(case):
    core = fluid.core
    if not core.is_compiled_with_cuda() or core.cuda_device_count() == 0:
        pytest.skip("no CUDA device: the vision CUDA kernels are compiled, not run")
    build, shape = CUDA_CASES[case]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = L.data("x", list(shape), append_batch_size=False, dtype="float64",
                   stop_gradient=False)
        out = build(x)
        w = L.data("w", list(out.shape), append_batch_size=False, dtype="float64")
        loss = L.reduce_sum(L.elementwise_mul(out, w))
        pairs = fluid.append_backward(loss)
    rng = np.random.RandomState(33)
    feed = {"x": distinct(*shape, seed=34), "w": rng.uniform(0.5, 1.5, out.shape)}
    cpu_scope = core.Scope()
    fluid.Executor(fluid.CPUPlace()).run(startup, scope=cpu_scope)
    fetch = [out, "x@GRAD"] + [g for _, g in pairs]
    results = []
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        scope = core.Scope()
        for p, _ in pairs:
            scope.var(p.name).get_tensor().set(
                np.array(cpu_scope.find_var(p.name).get_tensor()), place)
        results.append(fluid.Executor(place).run(main, feed=feed, fetch_list=fetch, scope=scope))
    names = ["out", "x@GRAD"] + [g.name for _, g in pairs]
    for name, a, b in zip(names, *results):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11, err_msg=name)


RUNTIME_SIZE_CASES = {
    "resize_out_size": (lambda x, s: L.resize_bilinear(x, out_shape=s, align_corners=False,
                                                       align_mode=0), (2, 3, 4, 5), [7, 3]),
    "nearest_actual_shape": (lambda x, s: L.resize_nearest(x, [2, 2], actual_shape=s),
                             (2, 3, 4, 5), [5, 9]),
    "pad2d_paddings": (lambda x, s: L.pad2d(x, s, mode="reflect"), (2, 3, 4, 5), [1, 3, 2, 0]),
    "affine_grid_shape": (lambda x, s: L.affine_grid(x, s), (2, 2, 3), [2, 1, 4, 3]),
}


@pytest.mark.parametrize("case", sorted(RUNTIME_SIZE_CASES))
def test_cuda_sizes_read_at_run_time_match_cpu(case):
    core = fluid.core
    if not core.is_compiled_with_cuda() or core.cuda_device_count() == 0:
        pytest.skip("no CUDA device: the vision CUDA kernels are compiled, not run")
    build, shape, size = RUNTIME_SIZE_CASES[case]
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = L.data("x", list(shape), append_batch_size=False, dtype="float64",
                   stop_gradient=False)
        sv = L.data("s", [len(size)], append_batch_size=False, dtype="int32")
        out = build(x, sv)
        loss = L.reduce_sum(L.square(out))
        fluid.append_backward(loss)
    feed = {"x": distinct(*shape, seed=45), "s": np.array(size, dtype="int32")}
    results = []
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        exe, scope = fluid.Executor(place), core.Scope()
        exe.run(startup, scope=scope)
        results.append(exe.run(main, feed=feed, fetch_list=[out, "x@GRAD"], scope=scope))
    for name, a, b in zip(["out", "x@GRAD"], *results):
        np.testing.assert_allclose(b, a, rtol=1e-9, atol=1e-11, err_msg=name)


def test_random_crop_on_cuda_crops_as_on_cpu():
    core = fluid.core
    if not core.is_compiled_with_cuda() or core.cuda_device_count() == 0:
        pytest.skip("no CUDA device: the random_crop CUDA kernel is compiled, not run")
    x = np.arange(2 * 3 * 5 * 6, dtype="float32").reshape(2, 3, 5, 6)
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = L.data("x", [2, 3, 5, 6], append_batch_size=False)
        out = L.random_crop(xv, [3, 4], seed=11)
    runs = []
    for place in (fluid.CPUPlace(), fluid.CUDAPlace(0)):
        exe, scope = fluid.Executor(place), core.Scope()
        exe.run(startup, scope=scope)
        runs.append([exe.run(main, feed={"x": x}, fetch_list=[out], scope=scope)[0]
                     for _ in range(3)])
    for a, b in zip(*runs):
        np.testing.assert_array_equal(b, a)


# ---- training --------------------------------------------------------------------------------

def test_small_cnn_trains_through_vision_layers():
    rng = np.random.RandomState(0)
    images = rng.uniform(-1, 1, (16, 2, 6, 6)).astype("float32")
    labels = (images[:, 0].mean(axis=(1, 2)) > images[:, 1].mean(axis=(1, 2))).astype("int64")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = L.data("img", [2, 6, 6])
        label = L.data("label", [1], dtype="int64")
        scale = L.create_parameter([2], "float32",
                                   default_initializer=fluid.initializer.Constant(1.0))
        bias = L.create_parameter([2], "float32", is_bias=True)
        h = L.affine_channel(img, scale, bias)
        h = L.pad2d(h, [1, 1, 1, 1], mode="reflect")
        h = L.resize_bilinear(h, out_shape=[6, 6], align_corners=False, align_mode=0)
        vol = L.reshape(h, [-1, 1, 2, 6, 6])
        vol = L.conv3d(vol, 4, [2, 3, 3], padding=[0, 1, 1], act="relu")
        vol = L.pool3d(vol, [1, 2, 2], "max", [1, 2, 2])
        h = L.reshape(vol, [-1, 4, 3, 3])
        h = L.shuffle_channel(h, 2)
        h = L.adaptive_pool2d(h, [2, 2], "avg")
        logits = L.fc(h, 2)
        loss = L.mean(L.softmax_with_cross_entropy(logits, label))
        fluid.optimizer.Adam(0.05).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(12):
        (lv,) = exe.run(main, feed={"img": images, "label": labels.reshape(-1, 1)},
                        fetch_list=[loss], scope=scope)
        losses.append(float(np.asarray(lv).ravel()[0]))
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0], losses


def test_spatial_transformer_and_volume_decoder_train():
    # A learned affine_grid / grid_sampler warp, temporal_shift, space_to_depth and unfold in
    # front of a classifier, and a conv3d_transpose decoder with a reconstruction loss.
    rng = np.random.RandomState(1)
    images = rng.uniform(-1, 1, (8, 4, 6, 6)).astype("float32")
    labels = (images[:, :2].mean(axis=(1, 2, 3)) > images[:, 2:].mean(axis=(1, 2, 3)))
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        img = L.data("img", [4, 6, 6])
        label = L.data("label", [1], dtype="int64")
        theta = L.reshape(L.fc(L.flatten(img), 6, act="tanh"), [-1, 2, 3])
        warped = L.grid_sampler(img, L.affine_grid(theta, [8, 4, 6, 6]))
        h = L.temporal_shift(warped, 2)
        h = L.space_to_depth(h, 2)  # [N, 16, 3, 3]
        cols = L.unfold(h, [2, 2])  # [N, 64, 4]
        logits = L.fc(cols, 2)
        cls_loss = L.mean(L.softmax_with_cross_entropy(logits, label))
        vol = L.reshape(h, [-1, 4, 4, 3, 3])
        recon = L.conv3d_transpose(vol, 1, filter_size=[1, 2, 2], stride=[1, 2, 2])  # 4x6x6
        target = L.reshape(img, [-1, 1, 4, 6, 6])
        rec_loss = L.mean(L.square(L.elementwise_sub(recon, target)))
        loss = L.elementwise_add(cls_loss, rec_loss)
        fluid.optimizer.Adam(0.02).minimize(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.core.Scope()
    exe.run(startup, scope=scope)
    losses = []
    for _ in range(15):
        (lv,) = exe.run(main, feed={"img": images, "label": labels.reshape(-1, 1).astype("int64")},
                        fetch_list=[loss], scope=scope)
        losses.append(float(np.asarray(lv).ravel()[0]))
    assert np.all(np.isfinite(losses))
    assert losses[-1] < 0.8 * losses[0], losses
