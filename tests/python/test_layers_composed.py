"""Fluid layers built from other layers (no op of their own) against NumPy formulas."""
import numpy as np
import pytest

import loom as fluid

L = fluid.layers


def run(build, feed, dtype="float64"):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        outs = build()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        return exe.run(main, feed=feed, fetch_list=list(outs))


rng = np.random.RandomState(0)
X = rng.randn(4, 6)
Y = rng.randn(4, 6)


def xy():
    return fluid.data("x", [4, 6], dtype="float64"), fluid.data("y", [4, 6], dtype="float64")


def test_losses():
    lab = (rng.rand(4, 6) > 0.5).astype("float64")
    prob = rng.uniform(0.05, 0.95, size=(4, 6))
    t = rng.dirichlet(np.ones(6), size=4)
    t[0, 0] = 0.0

    def build():
        x, y = xy()
        lb = fluid.data("lab", [4, 6], dtype="float64")
        p = fluid.data("p", [4, 6], dtype="float64")
        tt = fluid.data("t", [4, 6], dtype="float64")
        return (L.mse_loss(x, y), L.huber_loss(x, y, 0.7), L.smooth_l1(x, y, sigma=2.0),
                L.log_loss(p, lb, epsilon=1e-4), L.margin_rank_loss(lb, x, y, margin=0.2),
                L.rank_loss(lb, x, y), L.kldiv_loss(x, tt, "batchmean"),
                L.kldiv_loss(x, tt, "none"))
    mse, hub, sl1, ll, mrl, rl, kl, kln = run(build, {"x": X, "y": Y, "lab": lab, "p": prob,
                                                       "t": t})
    np.testing.assert_allclose(mse, [np.mean((X - Y) ** 2)], rtol=1e-12)
    r = Y - X
    # Constants reach the ops as float32 attributes (as in Fluid): 1e-6 relative.
    np.testing.assert_allclose(hub, np.where(np.abs(r) <= 0.7, 0.5 * r * r,
                                             0.7 * (np.abs(r) - 0.35)), rtol=1e-6)
    d = X - Y
    v = np.where(np.abs(d) < 0.25, 0.5 * 4 * d * d, np.abs(d) - 0.125)
    np.testing.assert_allclose(sl1, v.sum(1, keepdims=True), rtol=1e-6)
    np.testing.assert_allclose(ll, -lab * np.log(prob + 1e-4) - (1 - lab) * np.log(
        1 - prob + 1e-4), rtol=1e-6)
    np.testing.assert_allclose(mrl, np.maximum(0, -lab * (X - Y) + 0.2), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(rl, np.log1p(np.exp(X - Y)) - lab * (X - Y), rtol=1e-10)
    want_kl = np.where(t > 0, t * (np.log(np.maximum(t, 1e-30)) - X), 0)
    np.testing.assert_allclose(kln, want_kl, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(kl, [want_kl.sum() / 4], rtol=1e-12)
    with pytest.raises(ValueError, match="reduction 'avg'"):
        with fluid.program_guard(fluid.Program()):
            L.kldiv_loss(*xy(), reduction="avg")


def test_shapes_and_norms():
    img = rng.randn(2, 8, 3, 3)

    def build():
        x, _ = xy()
        im = fluid.data("img", [2, 8, 3, 3], dtype="float64")
        return (L.l2_normalize(x, axis=1), L.reduce_min(x, dim=1), L.ones_like(x),
                L.maxout(im, 2), L.pixel_shuffle(im, 2), *L.unstack(x, axis=0),
                L.expand_as(L.slice(x, [0], [0], [1]), x))
    out = run(build, {"x": X, "y": Y, "img": img})
    l2n, rmin, ones, mo, ps = out[:5]
    rows, ex = out[5:9], out[9]
    np.testing.assert_allclose(l2n, X / np.sqrt((X ** 2).sum(1, keepdims=True)), rtol=1e-12)
    np.testing.assert_allclose(rmin, X.min(1), rtol=1e-12)
    assert (ones == 1).all() and ones.shape == X.shape
    np.testing.assert_allclose(mo, img.reshape(2, 4, 2, 3, 3).max(2), rtol=1e-12)
    want_ps = img.reshape(2, 2, 2, 2, 3, 3).transpose(0, 1, 4, 2, 5, 3).reshape(2, 2, 6, 6)
    np.testing.assert_allclose(ps, want_ps, rtol=1e-12)
    for i in range(4):
        np.testing.assert_array_equal(rows[i], X[i])
    np.testing.assert_array_equal(ex, np.tile(X[:1], (4, 1)))


def test_prelu_modes_and_checks():
    img = rng.randn(2, 3, 2, 2)

    def build():
        im = fluid.data("img", [2, 3, 2, 2], dtype="float64")
        return (L.prelu(im, "all"), L.prelu(im, "channel", param_attr=fluid.ParamAttr(
            initializer=fluid.initializer.NumpyArrayInitializer(np.array([0.1, 0.2, 0.3])))))
    a, c = run(build, {"img": img})
    np.testing.assert_allclose(a, np.where(img > 0, img, 0.25 * img), rtol=1e-12)
    alpha = np.array([0.1, 0.2, 0.3], "float32").astype("float64")[None, :, None, None]
    np.testing.assert_allclose(c, np.where(img > 0, img, alpha * img), rtol=1e-7)


def test_nan_inf_mod_floordiv_rank():
    bad = np.array([1.0, np.nan, 2.0])
    inf = np.array([1.0, np.inf, 2.0])
    ok = np.array([1.0, 2.0, 3.0])
    a = np.array([7, -7, 7, -7], "int64")
    b = np.array([3, 3, -3, -3], "int64")

    def build():
        vs = [fluid.data(n, [3], dtype="float64") for n in ("bad", "inf", "ok")]
        ia, ib = (fluid.data(n, [4], dtype="int64") for n in ("a", "b"))
        return (L.has_nan(vs[0]), L.has_nan(vs[2]), L.has_inf(vs[1]), L.isfinite(vs[2]),
                L.isfinite(vs[1]), L.elementwise_mod(ia, ib), L.elementwise_floordiv(ia, ib),
                L.rank(vs[0]))
    hn, hn2, hi, f1, f2, mod, fd, rk = run(build, {"bad": bad, "inf": inf, "ok": ok, "a": a,
                                                    "b": b})
    assert bool(hn[0]) and not bool(hn2[0]) and bool(hi[0]) and bool(f1[0]) and not bool(f2[0])
    np.testing.assert_array_equal(mod, np.mod(a, b))
    np.testing.assert_array_equal(fd, np.floor_divide(a, b))
    assert mod.dtype == np.int64 and int(rk[0]) == 1


def test_counter_crop_pad_multiplex_size():
    xv = np.arange(12, dtype="float64").reshape(3, 4)

    def build():
        x = fluid.data("x", [3, 4], dtype="float64")
        idx = fluid.data("idx", [3, 1], dtype="int64")
        y = L.scale(x, 10.0)
        return (L.autoincreased_step_counter(begin=5), L.crop_tensor(x, [2, -1], [1, 1]),
                L.pad(x, [1, 0, 0, 2], pad_value=-1.0),
                L.pad_constant_like(L.pad(x, [0, 1, 0, 1]), x, pad_value=7.0),
                L.multiplex([x, y], idx), L.size(x))
    c, cr, p, pcl, mx, sz = run(build, {"x": xv, "idx": np.array([[1], [0], [1]], "int64")})
    assert int(c[0]) == 5 and int(sz[0]) == 12
    np.testing.assert_array_equal(cr, xv[1:3, 1:])
    want = np.full((4, 6), -1.0)
    want[1:, :4] = xv
    np.testing.assert_array_equal(p, want)
    want = np.full((4, 5), 7.0)
    want[:3, :4] = xv
    np.testing.assert_array_equal(pcl, want)
    np.testing.assert_array_equal(mx, np.stack([10 * xv[0], xv[1], 10 * xv[2]]))


def test_instance_group_norm_and_lrn():
    img = rng.randn(2, 4, 3, 3)

    def build():
        im = fluid.data("img", [2, 4, 3, 3], dtype="float64")
        return L.instance_norm(im), L.group_norm(im, 2), L.lrn(im, n=3, k=2.0, alpha=0.1,
                                                             beta=0.5)
    inn, gn, lr = run(build, {"img": img})
    m = img.mean((2, 3), keepdims=True)
    v = img.var((2, 3), keepdims=True)
    np.testing.assert_allclose(inn, (img - m) / np.sqrt(v + 1e-5), rtol=1e-6)
    g = img.reshape(2, 2, -1)
    want = ((g - g.mean(2, keepdims=True)) / np.sqrt(g.var(2, keepdims=True) + 1e-5))
    np.testing.assert_allclose(gn, want.reshape(img.shape), rtol=1e-6)
    sq = np.pad(img ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    s = sq[:, 0:4] + sq[:, 1:5] + sq[:, 2:6]
    np.testing.assert_allclose(lr, img / (2.0 + 0.1 * s) ** 0.5, rtol=1e-6)
