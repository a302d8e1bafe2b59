"""Fluid layers and fluid.nets beyond the core set, each run in a program against NumPy."""
import numpy as np
import pytest

import loom as fluid

L = fluid.layers


def run(build, feed, startup_seed=1):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = startup_seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        outs = build()
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        return exe.run(main, feed=feed, fetch_list=list(outs))


def test_conv2d_transpose_sizes_and_values():
    x = np.random.RandomState(0).randn(2, 3, 4, 4).astype("float32")

    def build():
        d = fluid.data("x", [None, 3, 4, 4])
        a = L.conv2d_transpose(d, 5, filter_size=3, stride=2, padding=1, bias_attr=False,
                               param_attr=fluid.ParamAttr(
                                   initializer=fluid.initializer.Constant(1.0)))
        b = L.conv2d_transpose(d, 2, output_size=[8, 8], stride=2)
        return a, b
    a, b = run(build, {"x": x})
    assert a.shape == (2, 5, 7, 7) and b.shape == (2, 2, 8, 8)
    # All-ones filters: an output pixel sums every input channel at the pixels that reach it.
    center = x[:, :, 1, 1].sum(axis=1)  # output (2, 2) is reached from input (1, 1) only
    np.testing.assert_allclose(a[:, 0, 2, 2], center, rtol=1e-5)


def test_sigmoid_xent_one_hot_label_smooth_fill_like():
    logits = np.array([[0.5, -1.0], [2.0, 0.0]], "float32")
    labels = np.array([[1.0, 0.0], [0.0, 1.0]], "float32")
    ids = np.array([[1], [0]], "int64")

    def build():
        x = fluid.data("x", [None, 2])
        z = fluid.data("z", [None, 2])
        i = fluid.data("i", [None, 1], dtype="int64")
        oh = L.one_hot(i, 3)
        return (L.sigmoid_cross_entropy_with_logits(x, z), oh, L.label_smooth(oh, epsilon=0.3),
                L.fill_constant_batch_size_like(x, [-1, 5], "int64", 7), L.shape(oh))
    xent, oh, smooth, filled, shp = run(build, {"x": logits, "z": labels, "i": ids})
    p = 1 / (1 + np.exp(-logits))
    np.testing.assert_allclose(xent, -(labels * np.log(p) + (1 - labels) * np.log(1 - p)),
                               rtol=1e-5)
    np.testing.assert_array_equal(oh, [[0, 1, 0], [1, 0, 0]])
    np.testing.assert_allclose(smooth, oh * 0.7 + 0.1, rtol=1e-6)
    assert filled.dtype == np.int64 and filled.shape == (2, 5) and (filled == 7).all()
    np.testing.assert_array_equal(shp, [2, 3])


def test_expand_cos_sim_argsort_where_clip_by_norm():
    x = np.array([[3.0, 4.0], [1.0, 0.0]], "float32")
    y = np.array([[1.0, 0.0]], "float32")

    def build():
        a = fluid.data("a", [2, 2])
        b = fluid.data("b", [1, 2])
        vals, ids = L.argsort(a, axis=1, descending=True)
        return (L.expand(a, [1, 2]), L.cos_sim(a, b), vals, ids,
                L.where(L.greater_than(a, L.fill_constant([2, 2], "float32", 2.0))),
                L.clip_by_norm(a, 1.0))
    ex, cs, vals, ids, wh, clipped = run(build, {"a": x, "b": y})
    np.testing.assert_array_equal(ex, np.tile(x, (1, 2)))
    np.testing.assert_allclose(cs.ravel(), [0.6, 1.0], rtol=1e-6)
    np.testing.assert_array_equal(vals, [[4, 3], [1, 0]])
    np.testing.assert_array_equal(ids, [[1, 0], [0, 1]])
    np.testing.assert_array_equal(wh, [[0, 0], [0, 1]])
    np.testing.assert_allclose(np.linalg.norm(clipped), 1.0, rtol=1e-6)


def test_nets_conv_pool_group_glu_attention_shapes_and_training():
    img = np.random.RandomState(1).randn(4, 1, 12, 12).astype("float32")
    label = np.array([[0], [1], [2], [1]], "int64")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("img", [None, 1, 12, 12])
        y = fluid.data("label", [None, 1], dtype="int64")
        h = fluid.nets.simple_img_conv_pool(x, 4, 3, pool_size=2, pool_stride=2, act="relu")
        h = fluid.nets.img_conv_group(h, [6, 6], pool_size=2, pool_stride=2, conv_act="relu",
                                      conv_with_batchnorm=[True, False],
                                      conv_batchnorm_drop_rate=[0.0, 0.0])
        seq = L.reshape(h, [0, 6, 4])  # [batch, 6 steps, 4]
        att = fluid.nets.scaled_dot_product_attention(seq, seq, seq, num_heads=2)
        g = fluid.nets.glu(L.fc(att, 8, num_flatten_dims=2), dim=-1)
        logits = L.fc(g, 3)
        loss = L.mean(L.softmax_with_cross_entropy(logits, y))
        fluid.optimizer.Adam(0.01).minimize(loss)
    assert tuple(att.shape[1:]) == (6, 4) and g.shape[-1] == 4
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        losses = [float(exe.run(main, feed={"img": img, "label": label},
                                fetch_list=[loss])[0][0]) for _ in range(30)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_attention_matches_numpy():
    rng = np.random.RandomState(2)
    q, k, v = (rng.randn(2, 3, 4).astype("float64") for _ in range(3))

    def build():
        a, b, c = (fluid.data(n, [2, 3, 4], dtype="float64") for n in "qkv")
        return (fluid.nets.scaled_dot_product_attention(a, b, c, num_heads=2),)
    (got,) = run(build, {"q": q, "k": k, "v": v})
    heads = []
    for h in range(2):
        qs, ks, vs = (t[:, :, 2 * h:2 * h + 2] for t in (q, k, v))
        s = qs @ ks.transpose(0, 2, 1) * float(np.float32(2 ** -0.5))  # alpha is float32
        w = np.exp(s - s.max(-1, keepdims=True))
        w /= w.sum(-1, keepdims=True)
        heads.append(w @ vs)
    np.testing.assert_allclose(got, np.concatenate(heads, -1), rtol=1e-10)


def test_fluid_data_shapes_and_errors():
    main = fluid.Program()
    with fluid.program_guard(main):
        x = fluid.data("x", [None, 3, -1])
        assert list(x.shape) == [-1, 3, -1]
        with pytest.raises(ValueError, match="dims are None, -1 or >= 0"):
            fluid.data("y", [None, -2])
        z = fluid.data("z", [None, 1], lod_level=2)
        assert z.lod_level == 2 and x.lod_level == 0
        with pytest.raises(ValueError, match="lod_level must be an int >= 0"):
            fluid.data("w", [None, 1], lod_level=-1)


def test_paddle_implementation_attributes_are_accepted_and_ignored():
    """Programs from Paddle carry use_mkldnn / use_cudnn / op_callstack ...: accepted (same
    results), while a layout Loom does not compute is refused, naming it."""
    from loom import core
    x = np.array([[-1.0, 2.0, 3.0]], "float32")

    def build():
        d = fluid.data("x", [None, 3])
        return (L.softmax(L.relu(d)),)
    (want,) = run(build, {"x": x})
    main = fluid.Program()
    with fluid.program_guard(main):
        d = fluid.data("x", [None, 3])
        out = L.softmax(L.relu(d))
    for op in main.global_block().ops:
        op._set_attr("use_mkldnn", True)
        op._set_attr("use_cudnn", True)
        op._set_attr("op_callstack", ["model.py:12"])
        op._set_attr("data_format", "AnyLayout")
    exe = fluid.Executor(fluid.CPUPlace())
    (got,) = exe.run(main, feed={"x": x}, fetch_list=[out])
    np.testing.assert_array_equal(got, want)
    names = {a["name"] for a in core.accepted_attrs()}
    assert {"use_mkldnn", "use_cudnn", "is_test", "data_format"} <= names
    main.global_block().ops[0]._set_attr("data_format", "NHWC")
    with pytest.raises(core.InvalidArgumentError, match="data_format 'NHWC'"):
        exe.run(main, feed={"x": x}, fetch_list=[out])


def test_print_writes_the_tensor_and_its_gradient_and_passes_it_on():
    import subprocess
    import sys
    code = """
import numpy as np, loom as fluid
main, startup = fluid.Program(), fluid.Program()
with fluid.program_guard(main, startup):
    x = fluid.data("x", [None, 2])
    y = fluid.layers.fc(x, 1, bias_attr=False,
                        param_attr=fluid.ParamAttr(initializer=fluid.initializer.Constant(1.0)))
    p = fluid.layers.Print(y, message="pred", first_n=2, summarize=4)
    loss = fluid.layers.mean(p)
    fluid.optimizer.SGD(0.1).minimize(loss)
exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
for _ in range(3):
    out = exe.run(main, feed={"x": np.array([[1., 2.], [3., 4.]], "float32")}, fetch_list=[p])
print(out[0].ravel().tolist())
"""
    import os
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(fluid.__file__)))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       env=env)
    assert r.returncode == 0, r.stderr
    # first_n=2: two forward prints and two backward prints (both phases), not six.
    assert r.stderr.count("pred\tTensor[") == 4, r.stderr
    assert "shape: [2, 1]" in r.stderr and "float32[2, 1] {3, 7}" in r.stderr, r.stderr
    assert "float32[2, 1] {0.5, 0.5}" in r.stderr, r.stderr  # d mean / d p
    # w: [1, 1] -> [0.8, 0.7] -> [0.6, 0.4] (d mean(x w) / dw = [2, 3]); the third run's p.
    np.testing.assert_allclose(eval(r.stdout.strip()), [1.4, 3.4], rtol=1e-6)


def test_py_func_forward_and_backward():
    """tanh in Python, with its gradient in Python, trains like the built-in one."""
    def fwd(x):
        return np.tanh(x)

    def bwd(y, dy):  # x skipped: the gradient needs only y
        return dy * (1 - y * y)

    def build(use_py):
        main, startup = fluid.Program(), fluid.Program()
        with fluid.program_guard(main, startup), fluid.unique_name.guard():
            x = fluid.data("x", [None, 3])
            h = L.fc(x, 3, param_attr=fluid.ParamAttr(
                name="w", initializer=fluid.initializer.Constant(0.3)), bias_attr=False)
            if use_py:
                t = main.global_block().create_var(name="t", shape=[-1, 3], dtype="float32")
                L.py_func(fwd, h, t, backward_func=bwd, skip_vars_in_backward_input=[h])
            else:
                t = L.tanh(h)
            loss = L.mean(L.square(t))
            fluid.optimizer.SGD(0.5).minimize(loss)
        return main, startup, loss

    xv = np.random.RandomState(0).randn(4, 3).astype("float32")
    results = []
    for use_py in (True, False):
        main, startup, loss = build(use_py)
        exe = fluid.Executor(fluid.CPUPlace())
        with fluid.scope_guard(fluid.Scope()):
            exe.run(startup)
            ls = [float(exe.run(main, feed={"x": xv}, fetch_list=[loss])[0][0])
                  for _ in range(3)]
            results.append((ls, np.array(fluid.global_scope().find_var("w").get_tensor())))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-5)
    np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-5)

    def bad(x):
        raise RuntimeError("broken callable")
    main = fluid.Program()
    with fluid.program_guard(main):
        x = fluid.data("x", [None, 3])
        t = main.global_block().create_var(name="t", shape=[-1, 3], dtype="float32")
        L.py_func(bad, x, t)
    with pytest.raises(fluid.core.InvalidArgumentError, match="broken callable"):
        fluid.Executor(fluid.CPUPlace()).run(main, feed={"x": xv}, fetch_list=[t])


def test_switch_runs_the_first_true_case_or_the_default():
    def build():
        step = fluid.data("step", [1], dtype="float32")
        lr = L.create_global_var([1], 0.0, "float32", persistable=True, name="lr")
        with L.Switch() as switch:
            with switch.case(L.less_than(step, L.fill_constant([1], "float32", 2.0))):
                L.assign(np.array([0.1], "float32"), lr)
            with switch.case(L.less_than(step, L.fill_constant([1], "float32", 5.0))):
                L.assign(np.array([0.05], "float32"), lr)
            with switch.default():
                L.assign(np.array([0.01], "float32"), lr)
        return (lr,)
    for step, want in ((0.0, 0.1), (3.0, 0.05), (7.0, 0.01), (1.0, 0.1)):
        (got,) = run(build, {"step": np.array([step], "float32")})
        np.testing.assert_allclose(got, [want], rtol=1e-7, err_msg=str(step))


def test_assign_from_numpy():
    def build():
        return L.assign(np.arange(6, dtype="int64").reshape(2, 3)), L.assign([1.5, 2.5])
    a, b = run(build, {})
    np.testing.assert_array_equal(a, np.arange(6).reshape(2, 3))
    np.testing.assert_allclose(b, [1.5, 2.5])
