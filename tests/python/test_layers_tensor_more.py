"""The layers of tensor_more, loss_more and sequence_more: each against a NumPy reference,
with finite-difference gradient checks (float64) for the differentiable ones, their argument
errors, and a few steps of training through them."""
import numpy as np
import pytest

import loom as fluid
from op_test import OpTest

L = fluid.layers


def run(build, feed, seed=1):
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = seed
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        outs = build()
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    exe = fluid.Executor(fluid.CPUPlace())
    with fluid.scope_guard(fluid.Scope()):
        exe.run(startup)
        return exe.run(main, feed=feed, fetch_list=outs, return_numpy=False)


def build_only(build):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        build()


def rand(*shape, seed=0):
    return np.random.RandomState(seed).uniform(-1, 1, shape)


# ---- strided_slice ----

@pytest.mark.parametrize("axes,starts,ends,strides,ref", [
    ([1, 2, 3], [-3, 0, 2], [3, 2, 4], [1, 1, 1], lambda x: x[:, -3:3, 0:2, 2:4]),
    ([0, 1, 3], [0, -1, 5], [3, 0, 0], [2, -1, -2], lambda x: x[0:3:2, -1:0:-1, :, 5:0:-2]),
    ([1], [2], [-1], [-1], lambda x: x[:, 2::-1]),  # end -1 with a negative stride: to index 0
    ([2], [-100], [100], [2], lambda x: x[:, :, ::2]),  # bounds are clamped
])
def test_strided_slice_forward_and_grad(axes, starts, ends, strides, ref):
    x = rand(3, 4, 3, 6)
    t = OpTest(lambda x: L.strided_slice(x, axes, starts, ends, strides), {"x": x})
    t.check_forward(ref(x))
    t.check_grad()


def test_strided_slice_int_and_errors():
    x = np.arange(10, dtype="int64")
    got, = run(lambda: L.strided_slice(fluid.data("x", [10], "int64"), [0], [8], [1], [-3]),
               {"x": x})
    np.testing.assert_array_equal(np.array(got), x[8:1:-3])

    def bad(**kw):
        args = dict(axes=[0], starts=[0], ends=[2], strides=[1])
        args.update(kw)
        return lambda: L.strided_slice(fluid.data("x", [4, 5]), **args)
    with pytest.raises(ValueError, match="strided_slice: strides .* must not hold 0"):
        build_only(bad(strides=[0]))
    with pytest.raises(ValueError, match="strided_slice: axes .* same length"):
        build_only(bad(ends=[1, 2]))
    with pytest.raises(TypeError, match="strided_slice: starts must be a list of ints"):
        build_only(bad(starts=[0.5]))
    with pytest.raises(ValueError, match="strided_slice.*axis 2 of attribute 'axes'"):
        build_only(bad(axes=[2]))
    with pytest.raises(ValueError, match="strided_slice.*select nothing with stride -1"):
        build_only(bad(starts=[0], ends=[3], strides=[-1]))


# ---- scatter_nd_add / scatter_nd ----

def np_scatter_nd_add(ref, index, updates):
    out = ref.copy()
    k = index.shape[-1]
    idx = index.reshape(-1, k)
    up = updates.reshape((idx.shape[0],) + ref.shape[k:])
    for r in range(idx.shape[0]):
        out[tuple(idx[r])] += up[r]
    return out


def test_scatter_nd_add_forward_and_grad():
    ref = rand(3, 4, 2)
    index = np.array([[[0, 1], [2, 3]], [[0, 1], [1, 0]]], "int64")  # [0, 1] twice
    updates = rand(2, 2, 2, seed=1)
    t = OpTest(lambda ref, index, updates: L.scatter_nd_add(ref, index, updates),
               {"ref": ref, "index": index, "updates": updates})
    t.check_forward(np_scatter_nd_add(ref, index, updates))
    t.check_grad()


def test_scatter_nd_forward_and_grad():
    index = np.array([[1], [3], [1]], "int32")
    updates = rand(3, 5)
    t = OpTest(lambda index, updates: L.scatter_nd(index, updates, [4, 5]),
               {"index": index, "updates": updates})
    t.check_forward(np_scatter_nd_add(np.zeros((4, 5)), index, updates))
    t.check_grad()


def test_scatter_nd_errors():
    def build(index_shape, up_shape, index_dtype="int64"):
        return lambda: L.scatter_nd_add(fluid.data("r", [3, 4]), fluid.data(
            "i", index_shape, index_dtype), fluid.data("u", up_shape))
    with pytest.raises(ValueError, match="scatter_nd_add.*Updates.*Index.dims\\[:-1\\]"):
        build_only(build([2, 1], [2, 5]))
    with pytest.raises(ValueError, match="scatter_nd_add.*indexes 3 dims"):
        build_only(build([2, 3], [2]))
    with pytest.raises(TypeError, match="scatter_nd_add: index 'i' must be int32 or int64"):
        build_only(build([2, 1], [2, 4], "float32"))
    with pytest.raises(ValueError, match="scatter_nd: shape .* must be static"):
        build_only(lambda: L.scatter_nd(fluid.data("i", [2, 1], "int64"),
                                        fluid.data("u", [2]), [-1]))
    with pytest.raises(ValueError, match="Index 7 in row 1 is outside dim 0"):
        run(lambda: L.scatter_nd_add(fluid.data("r", [3], "float32"),
                                     fluid.data("i", [2, 1], "int64"), fluid.data("u", [2])),
            {"r": np.zeros(3, "float32"), "i": np.array([[0], [7]], "int64"),
             "u": np.ones(2, "float32")})


# ---- unique_with_counts ----

@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_unique_with_counts(dtype):
    x = np.array([2, 3, 3, 1, 5, 3], "float64")
    out, index, count = run(lambda: L.unique_with_counts(fluid.data("x", [6], "float64"), dtype),
                            {"x": x})
    np.testing.assert_array_equal(np.array(out), [2, 3, 1, 5])
    np.testing.assert_array_equal(np.array(index), [0, 1, 1, 2, 3, 1])
    np.testing.assert_array_equal(np.array(count), [1, 3, 1, 1])
    assert np.array(index).dtype == np.dtype(dtype) and np.array(count).dtype == np.dtype(dtype)


def test_unique_with_counts_errors():
    with pytest.raises(ValueError, match="unique_with_counts: x 'x' must be 1-D"):
        build_only(lambda: L.unique_with_counts(fluid.data("x", [2, 3], "int64")))
    with pytest.raises(TypeError, match="unique_with_counts: dtype must be int32 or int64"):
        build_only(lambda: L.unique_with_counts(fluid.data("x", [3], "int64"), "float32"))
