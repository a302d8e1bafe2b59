"""The layers of tensor_more, loss_more and sequence_more: each against a NumPy reference,
with finite-difference gradient checks (float64) for the differentiable ones, their argument
errors, and a few steps of training through them."""
import numpy as np
import pytest

import loom as fluid
from op_test import OpTest
from test_layer_attrs import check, set_attrs  # noqa: F401 (set_attrs is a fixture)

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


# ---- LoD helpers ----

def lod_tensor(array, lengths):
    return fluid.create_lod_tensor(np.asarray(array), [list(lengths)], fluid.CPUPlace())


def lod_grad_check(build, x, lengths, eps=1e-6, rtol=1e-6, atol=1e-8):
    """The gradient of sum(build(x) * w), for an output of x's rows and a fixed random w, with
    respect to the LoD input x against central differences."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = fluid.data("x", [None] + list(x.shape[1:]), "float64", lod_level=1)
        xv.stop_gradient = False
        out = build(xv)
        w = fluid.data("w", [None] + [int(s) for s in out.shape[1:]], "float64")
        loss = L.reduce_sum(L.elementwise_mul(out, w))
        fluid.backward.append_backward(loss)
    exe = fluid.Executor(fluid.CPUPlace())
    scope = fluid.Scope()
    exe.run(startup, scope=scope)
    wv = np.random.RandomState(7).uniform(0.5, 1.5, (x.shape[0],) + tuple(out.shape[1:]))

    def fetch(xa, what):
        return exe.run(main, feed={"x": lod_tensor(xa, lengths), "w": wv}, fetch_list=[what],
                       scope=scope)[0]
    numeric = np.zeros_like(x)
    for idx in np.ndindex(*x.shape):
        vals = []
        for d in (eps, -eps):
            p = x.copy()
            p[idx] += d
            vals.append(float(np.asarray(fetch(p, loss)).sum()))
        numeric[idx] = (vals[0] - vals[1]) / (2 * eps)
    np.testing.assert_allclose(np.asarray(fetch(x, "x@GRAD")), numeric, rtol=rtol, atol=atol)


# ---- edit_distance ----

def levenshtein(a, b):
    d = np.arange(len(b) + 1)
    for i in range(1, len(a) + 1):
        prev, d[0] = d.copy(), i
        for j in range(1, len(b) + 1):
            d[j] = min(prev[j] + 1, d[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1]))
    return d[len(b)]


HYPS = [[1, 2, 3, 4], [5, 0, 6], [7]]
REFS = [[1, 3, 4, 9], [5, 6, 0, 0, 8], [0, 7]]


@pytest.mark.parametrize("normalized", [True, False])
@pytest.mark.parametrize("ignored", [None, [0]])
def test_edit_distance_lod(normalized, ignored):
    def build():
        return L.edit_distance(fluid.data("h", [None, 1], "int64", lod_level=1),
                               fluid.data("r", [None, 1], "int64", lod_level=1),
                               normalized=normalized, ignored_tokens=ignored)
    flat = lambda seqs: np.array(sum(seqs, []), "int64").reshape(-1, 1)  # noqa: E731
    dist, num = run(build, {"h": lod_tensor(flat(HYPS), map(len, HYPS)),
                            "r": lod_tensor(flat(REFS), map(len, REFS))})
    drop = set(ignored or [])
    want = []
    for h, r in zip(HYPS, REFS):
        h, r = [t for t in h if t not in drop], [t for t in r if t not in drop]
        want.append(levenshtein(h, r) / (len(r) if normalized else 1.0))
    np.testing.assert_allclose(np.array(dist).ravel(), want, rtol=1e-6)
    assert np.array(dist).shape == (3, 1) and np.array(dist).dtype == np.float32
    assert np.array(num).tolist() == [3]


def test_edit_distance_padded_and_errors():
    h = np.array([[1, 2, 3, 4, 0], [5, 0, 6, 0, 0]], "int64")
    r = np.array([[1, 3, 4, 9, 0], [5, 6, 0, 0, 8]], "int64")
    hl, rl = np.array([4, 3], "int64"), np.array([4, 5], "int64")

    def build():
        return L.edit_distance(fluid.data("h", [2, 5], "int64"), fluid.data("r", [2, 5], "int64"),
                               normalized=False, input_length=fluid.data("hl", [2], "int64"),
                               label_length=fluid.data("rl", [2], "int64"))
    dist, num = run(build, {"h": h, "r": r, "hl": hl, "rl": rl})
    want = [levenshtein(h[i, :hl[i]].tolist(), r[i, :rl[i]].tolist()) for i in range(2)]
    np.testing.assert_allclose(np.array(dist).ravel(), want)
    assert np.array(num).tolist() == [2]
    with pytest.raises(TypeError, match="edit_distance: input 'h' must be int64"):
        build_only(lambda: L.edit_distance(fluid.data("h", [2, 1], "int32"),
                                           fluid.data("r", [2, 1], "int64")))
    with pytest.raises(ValueError, match="edit_distance: input_length and label_length go"):
        build_only(lambda: L.edit_distance(fluid.data("h", [2, 5], "int64"),
                                           fluid.data("r", [2, 5], "int64"),
                                           input_length=fluid.data("hl", [2], "int64")))
    with pytest.raises(ValueError, match="reference sequence 1 is empty"):
        run(lambda: L.edit_distance(fluid.data("h", [None, 1], "int64", lod_level=1),
                                    fluid.data("r", [None, 1], "int64", lod_level=1)),
            {"h": lod_tensor(np.ones((2, 1), "int64"), [1, 1]),
             "r": lod_tensor(np.ones((1, 1), "int64"), [1, 0])})


# ---- row_conv ----

def np_row_conv(x, w, lengths):
    out = np.zeros_like(x)
    start = 0
    for n in lengths:
        for t in range(n):
            for j in range(min(w.shape[0], n - t)):
                out[start + t] += x[start + t + j] * w[j]
        start += n
    return out


def test_row_conv_padded_forward_and_grad():
    x = rand(2, 4, 3)
    w = rand(3, 3, seed=1)
    t = OpTest(lambda x: L.row_conv(x, 2), {"x": x}, params={"w_0": w})
    t.check_forward(np_row_conv(x.reshape(8, 3), w, [4, 4]).reshape(2, 4, 3))
    t.check_grad()


def test_row_conv_lod_forward_and_grad():
    lengths = [3, 1, 4]
    x = rand(8, 2)
    init = fluid.initializer.NumpyArrayInitializer(rand(3, 2, seed=2))
    build = lambda x: L.row_conv(x, 2, param_attr=fluid.ParamAttr(initializer=init))  # noqa
    out, = run(lambda: build(fluid.data("x", [None, 2], "float64", lod_level=1)),
               {"x": lod_tensor(x, lengths)})
    np.testing.assert_allclose(np.array(out), np_row_conv(x, rand(3, 2, seed=2), lengths),
                               rtol=1e-6)
    assert out.recursive_sequence_lengths() == [lengths]
    lod_grad_check(build, x, lengths)


def test_row_conv_errors():
    with pytest.raises(ValueError, match="row_conv: future_context_size must be an int >= 0"):
        build_only(lambda: L.row_conv(fluid.data("x", [None, 3], lod_level=1), -1))
    with pytest.raises(ValueError, match="row_conv: input 'x' must be"):
        build_only(lambda: L.row_conv(fluid.data("x", [3]), 1))
    with pytest.raises(ValueError, match="row_conv.*input X has no LoD"):
        run(lambda: L.row_conv(fluid.data("x", [None, 3]), 1), {"x": np.ones((2, 3), "float32")})


# ---- ctc_greedy_decoder ----

def test_ctc_greedy_decoder_lod_and_padded():
    # arg max per step: [1, 1, 0, 2, 2, 1] | [0, 0] | [3, 3, 0, 3]
    labels = [1, 1, 0, 2, 2, 1, 0, 0, 3, 3, 0, 3]
    probs = np.full((12, 4), 0.1, "float32")
    probs[np.arange(12), labels] = 0.7
    out, = run(lambda: L.ctc_greedy_decoder(fluid.data("p", [None, 4], lod_level=1), blank=0),
               {"p": lod_tensor(probs, [6, 2, 4])})
    assert np.array(out).ravel().tolist() == [1, 2, 1, 3, 3]
    assert out.recursive_sequence_lengths() == [[3, 0, 2]]
    empty, = run(lambda: L.ctc_greedy_decoder(fluid.data("p", [None, 4], lod_level=1), blank=0),
                 {"p": lod_tensor(probs[6:8], [2])})
    assert np.array(empty).tolist() == [[-1]]

    padded = np.zeros((3, 6, 4), "float32")
    padded[0] = probs[:6]
    padded[1, :2] = probs[6:8]
    padded[2, :4] = probs[8:]
    out, length = run(lambda: L.ctc_greedy_decoder(
        fluid.data("p", [3, 6, 4]), blank=0, input_length=fluid.data("l", [3, 1], "int64"),
        padding_value=-5), {"p": padded, "l": np.array([[6], [2], [4]], "int64")})
    assert np.array(out).tolist() == [[1, 2, 1, -5, -5, -5], [-5] * 6, [3, 3, -5, -5, -5, -5]]
    assert np.array(length).tolist() == [[3], [0], [2]]
    with pytest.raises(ValueError, match="ctc_greedy_decoder: blank must be an int >= 0"):
        build_only(lambda: L.ctc_greedy_decoder(fluid.data("p", [None, 4], lod_level=1), -1))
    with pytest.raises(ValueError, match="ctc_greedy_decoder: with input_length"):
        build_only(lambda: L.ctc_greedy_decoder(fluid.data("p", [None, 4], lod_level=1), 0,
                                                input_length=fluid.data("l", [3], "int64")))


# ---- im2sequence ----

def np_im2sequence(x, k, s, p):
    n, c, h, w = x.shape
    xp = np.zeros((n, c, h + p[0] + p[2], w + p[1] + p[3]))
    xp[:, :, p[0]:p[0] + h, p[1]:p[1] + w] = x
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    rows = [xp[i, :, y * s[0]:y * s[0] + k[0], z * s[1]:z * s[1] + k[1]].ravel()
            for i in range(n) for y in range(oh) for z in range(ow)]
    return np.array(rows), oh * ow


def test_im2sequence_forward_and_grad():
    x = rand(2, 2, 4, 5)
    t = OpTest(lambda x: L.im2sequence(x, filter_size=[2, 3], stride=[2, 1], padding=[1, 0, 0, 1]),
               {"x": x})
    want, per_image = np_im2sequence(x, [2, 3], [2, 1], [1, 0, 0, 1])
    t.check_forward(want)
    t.check_grad()
    out, = run(lambda: L.im2sequence(fluid.data("x", [2, 2, 4, 5], "float64"), 2, 1, 1),
               {"x": x})
    np.testing.assert_allclose(np.array(out), np_im2sequence(x, [2, 2], [1, 1], [1] * 4)[0])
    assert out.recursive_sequence_lengths() == [[30, 30]]
    with pytest.raises(ValueError, match="im2sequence: input 'x' must be NCHW"):
        build_only(lambda: L.im2sequence(fluid.data("x", [2, 4, 5]), 2))
    with pytest.raises(ValueError, match="im2sequence.*kernels 5x5 do not fit"):
        build_only(lambda: L.im2sequence(fluid.data("x", [2, 1, 4, 4]), 5))
    with pytest.raises(NotImplementedError, match="im2sequence: input_image_size"):
        build_only(lambda: L.im2sequence(fluid.data("x", [2, 1, 4, 4]), 2,
                                         input_image_size=fluid.data("y", [2, 2])))


# ---- shard_index / hash / sampling_id ----

def test_shard_index():
    x = np.array([[1], [6], [12], [19]], "int64")
    out, = run(lambda: L.shard_index(fluid.data("x", [4, 1], "int64"), 20, 2, 1, -3), {"x": x})
    assert np.array(out).ravel().tolist() == [-3, -3, 2, 9]  # shard 1 holds ids 10..19
    with pytest.raises(ValueError, match="shard_index: shard_id must be in \\[0, nshards = 2\\)"):
        build_only(lambda: L.shard_index(fluid.data("x", [4, 1], "int64"), 20, 2, 2))
    with pytest.raises(TypeError, match="shard_index: input 'x' must be int32 or int64"):
        build_only(lambda: L.shard_index(fluid.data("x", [4, 1]), 20, 2, 0))
    with pytest.raises(ValueError, match="id 25 at 1 is outside \\[0, index_num = 20\\)"):
        run(lambda: L.shard_index(fluid.data("x", [2, 1], "int64"), 20, 2, 0),
            {"x": np.array([[1], [25]], "int64")})


M64 = (1 << 64) - 1
P1, P2, P3, P4, P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9,
                      0x85EBCA77C2B2AE63, 0x27D4EB2F165667C5)


def xxh64(data, seed):
    """A plain Python XXH64, checked below against published digests."""
    rotl = lambda v, r: ((v << r) | (v >> (64 - r))) & M64  # noqa: E731
    rnd = lambda acc, v: rotl((acc + v * P2) & M64, 31) * P1 & M64  # noqa: E731
    u64 = lambda i: int.from_bytes(data[i:i + 8], "little")  # noqa: E731
    n, i = len(data), 0
    if n >= 32:
        v = [(seed + P1 + P2) & M64, (seed + P2) & M64, seed, (seed - P1) & M64]
        while i + 32 <= n:
            v = [rnd(v[k], u64(i + 8 * k)) for k in range(4)]
            i += 32
        h = (rotl(v[0], 1) + rotl(v[1], 7) + rotl(v[2], 12) + rotl(v[3], 18)) & M64
        for k in range(4):
            h = ((h ^ rnd(0, v[k])) * P1 + P4) & M64
    else:
        h = (seed + P5) & M64
    h = (h + n) & M64
    while i + 8 <= n:
        h = (rotl(h ^ rnd(0, u64(i)), 27) * P1 + P4) & M64
        i += 8
    if i + 4 <= n:
        h = (rotl(h ^ (int.from_bytes(data[i:i + 4], "little") * P1 & M64), 23) * P2 + P3) & M64
        i += 4
    while i < n:
        h = rotl(h ^ (data[i] * P5 & M64), 11) * P1 & M64
        i += 1
    h = (h ^ (h >> 33)) * P2 & M64
    h = (h ^ (h >> 29)) * P3 & M64
    return h ^ (h >> 32)


def test_xxh64_reference_digests():
    assert xxh64(b"", 0) == 0xEF46DB3751D8E999
    assert xxh64(b"abc", 0) == 0x44BC2CF5AD770999
    assert xxh64(b"Nobody inspects the spammish repetition", 0) == 0xFBCEA83C8A378BF1


@pytest.mark.parametrize("dtype,width", [("int32", 1), ("int32", 3), ("int64", 4),
                                         ("int64", 5)])
def test_hash(dtype, width):
    x = np.random.RandomState(width).randint(0, 1 << 30, (4, width)).astype(dtype)
    out, = run(lambda: L.hash(fluid.data("x", [4, width], dtype), hash_size=1000, num_hash=3),
               {"x": x})
    want = [[[xxh64(x[r].tobytes(), k) % 1000] for k in range(3)] for r in range(4)]
    assert np.array(out).tolist() == want
    with pytest.raises(ValueError, match="hash: hash_size must be an int >= 1"):
        build_only(lambda: L.hash(fluid.data("x", [4, 1], "int64"), 0))
    with pytest.raises(TypeError, match="hash: input 'x' must be int32 or int64"):
        build_only(lambda: L.hash(fluid.data("x", [4, 1]), 10))


def test_sampling_id():
    onehot = np.eye(4, dtype="float32")[[2, 0, 3, 1]]
    out, = run(lambda: L.sampling_id(fluid.data("x", [4, 4]), seed=3), {"x": onehot})
    assert np.array(out).tolist() == [2, 0, 3, 1]
    probs = np.tile(np.array([[0.25, 0.75]], "float32"), (4000, 1))
    out, = run(lambda: L.sampling_id(fluid.data("x", [4000, 2]), seed=5), {"x": probs})
    assert 0.72 < np.array(out).mean() < 0.78
    with pytest.raises(ValueError, match="sampling_id: min .* must be below max"):
        build_only(lambda: L.sampling_id(fluid.data("x", [4, 4]), min=1.0, max=0.5))


# ---- add_position_encoding / bilinear_tensor_product ----

def np_position_encoding(x, alpha, beta, lengths):
    out = np.array(x, dtype=np.float64)
    half = x.shape[-1] // 2
    start = 0
    for n in lengths:
        for t in range(n):
            k = np.arange(half)
            val = t / np.power(10000.0, k / (half - 1))
            out[start + t, :half] = alpha * x[start + t, :half] + beta * np.sin(val)
            out[start + t, half:] = alpha * x[start + t, half:] + beta * np.cos(val)
        start += n
    return out


def test_add_position_encoding_forward_and_grad():
    x = rand(2, 5, 6)
    t = OpTest(lambda x: L.add_position_encoding(x, alpha=0.5, beta=2.0), {"x": x})
    t.check_forward(np_position_encoding(x.reshape(10, 6), 0.5, 2.0, [5, 5]).reshape(2, 5, 6),
                    rtol=1e-6)
    t.check_grad()
    xl = rand(7, 4, seed=3)
    out, = run(lambda: L.add_position_encoding(fluid.data("x", [None, 4], "float64",
                                                          lod_level=1), 1.0, 1.0),
               {"x": lod_tensor(xl, [3, 4])})
    np.testing.assert_allclose(np.array(out), np_position_encoding(xl, 1.0, 1.0, [3, 4]),
                               rtol=1e-6)
    with pytest.raises(ValueError, match="add_position_encoding.*must be even"):
        build_only(lambda: L.add_position_encoding(fluid.data("x", [2, 5, 3]), 1.0, 1.0))


def test_bilinear_tensor_product_forward_and_grad():
    x, y = rand(3, 4), rand(3, 2, seed=1)
    w, b = rand(5, 4, 2, seed=2), rand(1, 5, seed=3)
    t = OpTest(lambda x, y: L.bilinear_tensor_product(x, y, 5), {"x": x, "y": y},
               params={"w_0": w, "b_0": b})
    t.check_forward(np.einsum("bm,imn,bn->bi", x, w, y) + b)
    t.check_grad()
    t = OpTest(lambda x, y: L.bilinear_tensor_product(x, y, 5, act="tanh", bias_attr=False),
               {"x": x, "y": y}, params={"w_0": w})
    t.check_forward(np.tanh(np.einsum("bm,imn,bn->bi", x, w, y)))
    t.check_grad()
    with pytest.raises(ValueError, match="bilinear_tensor_product: size must be an int >= 1"):
        build_only(lambda: L.bilinear_tensor_product(fluid.data("x", [3, 4]),
                                                     fluid.data("y", [3, 2]), 0))
    with pytest.raises(ValueError, match="bilinear_tensor_product.*same batch size"):
        build_only(lambda: L.bilinear_tensor_product(fluid.data("x", [3, 4]),
                                                     fluid.data("y", [2, 2]), 2))


# ---- losses ----

def test_bpr_loss_forward_and_grad():
    x = rand(4, 5)
    label = np.array([[0], [3], [4], [1]], "int64")
    t = OpTest(lambda x, label: L.bpr_loss(x, label), {"x": x, "label": label})
    want = np.zeros((4, 1))
    for i in range(4):
        p = x[i, label[i, 0]]
        want[i] = sum(-np.log(1 / (1 + np.exp(-(p - x[i, j]))))
                      for j in range(5) if j != label[i, 0]) / 4
    t.check_forward(want, rtol=1e-6)
    t.check_grad()
    with pytest.raises(TypeError, match="bpr_loss: label 'l' must be int32 / int64"):
        build_only(lambda: L.bpr_loss(fluid.data("x", [4, 5]), fluid.data("l", [4, 1])))


def test_dice_loss_forward_and_grad():
    x = np.random.RandomState(0).uniform(0.1, 1, (3, 4, 3))
    label = np.random.RandomState(1).randint(0, 3, (3, 4, 1)).astype("int64")
    t = OpTest(lambda x, label: L.dice_loss(x, label), {"x": x, "label": label})
    oh = np.eye(3)[label[..., 0]]
    inse = (x * oh).sum(axis=(1, 2))
    want = np.mean(1 - 2 * inse / (x.sum(axis=(1, 2)) + oh.sum(axis=(1, 2)) + 1e-5))
    t.check_forward(np.array([want]), rtol=1e-6)
    t.check_grad()
    with pytest.raises(ValueError, match="dice_loss: label .* last dim of 1"):
        build_only(lambda: L.dice_loss(fluid.data("x", [3, 4]), fluid.data("l", [3, 4], "int64")))


def np_npair(anchor, positive, labels, l2_reg):
    same = (labels.reshape(-1, 1) == labels.reshape(1, -1)).astype(np.float64)
    same /= same.sum(axis=1, keepdims=True)
    l2 = ((anchor ** 2).sum(1).mean() + (positive ** 2).sum(1).mean()) * 0.25 * l2_reg
    sim = anchor @ positive.T
    logp = sim - sim.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    ce = -(same * logp).sum(1)
    return l2 + (same * ce[:, None]).sum(0).mean()


def test_npair_loss_forward_and_grad():
    a, p = rand(4, 3), rand(4, 3, seed=1)
    labels = np.array([1, 2, 1, 0], "int64")
    t = OpTest(lambda a, p, labels: L.npair_loss(a, p, labels, l2_reg=0.01),
               {"a": a, "p": p, "labels": labels})
    t.check_forward(np.array([np_npair(a, p, labels, 0.01)]), rtol=1e-6)
    t.check_grad()


def test_center_loss_forward_update_and_grad():
    x = rand(4, 3)
    label = np.array([[0], [2], [0], [1]], "int64")
    centers = rand(3, 3, seed=1)
    init = fluid.initializer.NumpyArrayInitializer(centers)
    t = OpTest(lambda x, label: L.center_loss(x, label, 3, 0.1, fluid.ParamAttr(initializer=init),
                                              update_center=False), {"x": x, "label": label})
    t.check_forward(0.5 * ((x - centers[label[:, 0]]) ** 2).sum(1, keepdims=True), rtol=1e-6)
    t.check_grad()

    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        loss = L.center_loss(fluid.data("x", [4, 3], "float64"),
                             fluid.data("label", [4, 1], "int64"), 3, 0.1,
                             fluid.ParamAttr(name="centers", initializer=init))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    exe.run(main, feed={"x": x, "label": label}, fetch_list=[loss], scope=scope)
    got = np.array(scope.find_var("centers").get_tensor())
    want = centers.copy()
    for c in range(3):
        rows = label[:, 0] == c
        want[c] += 0.1 * (x[rows] - centers[c]).sum(0) / (1 + rows.sum())
    np.testing.assert_allclose(got, want, rtol=1e-6)
    with pytest.raises(TypeError, match="center_loss: label 'l' must be int32 / int64"):
        build_only(lambda: L.center_loss(fluid.data("x", [4, 3]), fluid.data("l", [4, 1]), 3,
                                         0.1, None))


def test_teacher_student_sigmoid_loss_forward_and_grad():
    x = np.array([[0.3], [-1.2], [2.0], [0.7], [-0.4], [1.5]])
    label = np.array([[-2.0], [-1.0], [0.3], [0.0], [1.6], [1.0]])
    t = OpTest(lambda x, label: L.teacher_student_sigmoid_loss(x, label),
               {"x": x, "label": label}, no_grad=["label"])
    ce = lambda x, z: np.maximum(x, 0) - x * z + np.log1p(np.exp(-np.abs(x)))  # noqa: E731
    want = np.where(label < -1, ce(x, 0), np.where(label < 0, ce(x, 1), np.where(
        label < 1, ce(x, 0) + ce(x, label), ce(x, 1) + ce(x, label - 1))))
    t.check_forward(want, rtol=1e-7)
    t.check_grad()
    with pytest.raises(ValueError, match="teacher_student_sigmoid_loss.*\\[batch, 1\\]"):
        build_only(lambda: L.teacher_student_sigmoid_loss(fluid.data("x", [4, 2]),
                                                          fluid.data("l", [4, 2])))


def test_mean_iou():
    pred = np.array([0, 1, 1, 2, 2, 2], "int32")
    label = np.array([0, 1, 2, 2, 0, 2], "int32")
    miou, wrong, correct = run(lambda: L.mean_iou(fluid.data("p", [6], "int32"),
                                                  fluid.data("l", [6], "int32"), 4),
                               {"p": pred, "l": label})
    # class 0: correct 1, wrong 1; class 1: 1, 1; class 2: 2, 2; class 3 absent.
    assert np.array(correct).tolist() == [1, 1, 2, 0]
    assert np.array(wrong).tolist() == [1, 1, 2, 0]
    np.testing.assert_allclose(np.array(miou), [0.5])
    with pytest.raises(TypeError, match="mean_iou: input 'p' and label 'l' must be int32"):
        build_only(lambda: L.mean_iou(fluid.data("p", [6]), fluid.data("l", [6], "int32"), 4))


def test_fsp_matrix_forward_and_grad():
    x, y = rand(2, 3, 2, 4), rand(2, 2, 2, 4, seed=1)
    t = OpTest(lambda x, y: L.fsp_matrix(x, y), {"x": x, "y": y})
    t.check_forward(np.einsum("nchw,ndhw->ncd", x, y) / 8)
    t.check_grad()
    with pytest.raises(ValueError, match="fsp_matrix: x and y must be .* same H, W"):
        build_only(lambda: L.fsp_matrix(fluid.data("x", [2, 3, 2, 4]),
                                        fluid.data("y", [2, 3, 4, 2])))


# ---- training through the new layers ----

def test_training_decreases_loss():
    rng = np.random.RandomState(0)
    x = rng.randn(16, 4, 6).astype("float32")
    label = rng.randint(0, 3, (16, 1)).astype("int64")
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 3
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        xv = fluid.data("x", [16, 4, 6])
        lv = fluid.data("label", [16, 1], "int64")
        h = L.row_conv(L.add_position_encoding(xv, 1.0, 0.1), 1)
        a = L.reshape(L.strided_slice(h, [1], [0], [4], [2]), [16, 12])  # rows 0 and 2
        b = L.reshape(L.strided_slice(h, [1], [3], [-1], [-2]), [16, 12])  # rows 3 and 1
        score = L.bilinear_tensor_product(a, b, 3)
        index = L.fill_constant([2, 1], "int64", 0)
        score = L.scatter_nd_add(score, index, L.fill_constant([2, 3], "float32", 0.5))
        loss = L.mean(L.elementwise_add(L.bpr_loss(score, lv), L.center_loss(
            score, lv, 3, 0.5, None)))
        fluid.optimizer.Adam(0.05).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    losses = [float(exe.run(main, feed={"x": x, "label": label}, fetch_list=[loss],
                            scope=scope)[0][0]) for _ in range(30)]
    assert losses[-1] < 0.7 * losses[0], losses


# ---- sequence_scatter / lod_append / continuous_value_model / similarity_focus /
# filter_by_instag ----

def grads_of(build, feed, names):
    """Forward outputs and the gradients of loss = sum(out * w) (w fed as "w", out's shape)."""
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        out = build()
        w = fluid.data("w", [None] + [int(s) for s in out.shape[1:]], out.dtype)
        fluid.backward.append_backward(L.reduce_sum(L.elementwise_mul(out, w)))
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    return exe.run(main, feed=feed, fetch_list=[out] + [n + "@GRAD" for n in names], scope=scope,
                   return_numpy=False)


def test_sequence_scatter_forward_and_grad():
    x = rand(3, 6)
    ids = np.array([[0], [5], [0], [2], [3], [1]], "int64")
    up = rand(6, 1, seed=1)
    lengths = [3, 2, 1]
    w = rand(3, 6, seed=2)

    def build():
        xv = fluid.data("x", [3, 6], "float64")
        uv = fluid.data("u", [None, 1], "float64", lod_level=1)
        xv.stop_gradient = uv.stop_gradient = False
        return L.sequence_scatter(xv, fluid.data("ids", [None, 1], "int64", lod_level=1), uv)
    out, dx, du = grads_of(build, {"x": x, "ids": lod_tensor(ids, lengths),
                                   "u": lod_tensor(up, lengths), "w": w}, ["x", "u"])
    want = x.copy()
    rows = np.repeat(np.arange(3), lengths)
    for j in range(6):
        want[rows[j], ids[j, 0]] += up[j, 0]
    np.testing.assert_allclose(np.array(out), want)
    # The op is linear: d/dx = w, d/du[j] = w at the place update j went.
    np.testing.assert_allclose(np.array(dx), w)
    np.testing.assert_allclose(np.array(du).ravel(), w[rows, ids[:, 0]])
    with pytest.raises(ValueError, match="Ids\\[1\\] = 9 is outside row 0 of X"):
        run(build, {"x": x, "ids": lod_tensor(np.array([[0], [9]], "int64"), [2, 0, 0]),
                    "u": lod_tensor(up[:2], [2, 0, 0])})
    with pytest.raises(TypeError, match="sequence_scatter: index 'i' must be int32 or int64"):
        build_only(lambda: L.sequence_scatter(fluid.data("x", [3, 6]), fluid.data("i", [6, 1]),
                                              fluid.data("u", [6, 1])))


def test_lod_append():
    x = np.arange(5, dtype="float32").reshape(5, 1)
    out, = run(lambda: L.lod_append(fluid.data("x", [None, 1], lod_level=1), [0, 1, 2, 3, 4, 5]),
               {"x": lod_tensor(x, [2, 3])})
    assert out.recursive_sequence_lengths() == [[2, 3], [1, 1, 1, 1, 1]]
    np.testing.assert_array_equal(np.array(out), x)
    plain, = run(lambda: L.lod_append(fluid.data("x", [5, 1]), [0, 2, 5]), {"x": x})
    assert plain.recursive_sequence_lengths() == [[2, 3]]
    with pytest.raises(TypeError, match="lod_append: level must be a non-empty list"):
        build_only(lambda: L.lod_append(fluid.data("x", [5, 1]), 3))


@pytest.mark.parametrize("use_cvm", [True, False])
def test_continuous_value_model(use_cvm):
    x = np.abs(rand(4, 5)) * 3
    cvm = np.abs(rand(4, 2, seed=1))
    w = rand(4, 5 if use_cvm else 3, seed=2)

    def build():
        xv = fluid.data("x", [4, 5], "float64")
        xv.stop_gradient = False
        return L.continuous_value_model(xv, fluid.data("cvm", [4, 2], "float64"), use_cvm)
    out, dx = grads_of(build, {"x": x, "cvm": cvm, "w": w}, ["x"])
    if use_cvm:
        want = x.copy()
        want[:, 0] = np.log(x[:, 0] + 1)
        want[:, 1] = np.log(x[:, 1] + 1) - want[:, 0]
    else:
        want = x[:, 2:]
    np.testing.assert_allclose(np.array(out), want)
    # The feature columns take Y@GRAD (= w); the show / click columns take cvm, as in Fluid.
    np.testing.assert_allclose(np.array(dx), np.hstack([cvm, w[:, 2:] if use_cvm else w]))
    with pytest.raises(ValueError, match="continuous_value_model: input 'x' must be"):
        build_only(lambda: L.continuous_value_model(fluid.data("x", [4, 1]),
                                                    fluid.data("c", [4, 2])))


def np_similarity_focus(x, axis, indexes):
    out = np.zeros_like(x)
    for n in range(x.shape[0]):
        for i in indexes:
            s = np.take(x[n], i, axis=axis - 1)
            rows, cols = set(), set()
            for e in np.argsort(-s, axis=None, kind="stable"):
                r, c = divmod(int(e), s.shape[1])
                if r in rows or c in cols:
                    continue
                rows.add(r)
                cols.add(c)
                idx = [r, c]
                idx.insert(axis - 1, slice(None))
                out[n][tuple(idx)] = 1
                if len(rows) == min(s.shape):
                    break
    return out


@pytest.mark.parametrize("axis,indexes", [(1, [0]), (1, [0, 2]), (2, [1]), (3, [0, 3])])
def test_similarity_focus(axis, indexes):
    x = rand(2, 3, 4, 5)
    out, = run(lambda: L.similarity_focus(fluid.data("x", [2, 3, 4, 5], "float64"), axis,
                                          indexes), {"x": x})
    np.testing.assert_array_equal(np.array(out), np_similarity_focus(x, axis, indexes))
    with pytest.raises(ValueError, match="similarity_focus: axis must be 1, 2 or 3"):
        build_only(lambda: L.similarity_focus(fluid.data("x", [2, 3, 4, 5]), 0, [0]))
    with pytest.raises(ValueError, match="similarity_focus.*index 7 of indexes is outside"):
        build_only(lambda: L.similarity_focus(fluid.data("x", [2, 3, 4, 5]), 1, [7]))


def test_filter_by_instag_forward_grad_and_empty():
    ins = rand(6, 2)
    lengths = [2, 1, 3]  # three instances
    tags = np.array([[1], [5], [2], [3], [5]], "int64")  # tags per instance: {1, 5}, {2}, {3, 5}
    w = rand(5, 2, seed=1)

    def build(filter_len):
        iv = fluid.data("ins", [None, 2], "float64", lod_level=1)
        iv.stop_gradient = False
        out, weight = L.filter_by_instag(
            iv, fluid.data("tags", [None, 1], "int64", lod_level=1),
            fluid.data("f", [filter_len], "int64"), True, out_val_if_empty=7)
        return out
    feed = {"ins": lod_tensor(ins, lengths), "tags": lod_tensor(tags, [2, 1, 2]),
            "f": np.array([5], "int64"), "w": w}
    out, dins = grads_of(lambda: build(1), feed, ["ins"])
    np.testing.assert_allclose(np.array(out), ins[[0, 1, 3, 4, 5]])
    assert out.recursive_sequence_lengths() == [[2, 3]]
    want = np.zeros_like(ins)
    want[[0, 1, 3, 4, 5]] = w
    np.testing.assert_allclose(np.array(dins), want)

    def build_both():
        out, weight = L.filter_by_instag(
            fluid.data("ins", [None, 2], "float64", lod_level=1),
            fluid.data("tags", [None, 1], "int64", lod_level=1), fluid.data("f", [1], "int64"),
            True, out_val_if_empty=7)
        return out, weight
    feed.pop("w")
    out, weight = run(build_both, dict(feed, f=np.array([9], "int64")))
    assert np.array(out).tolist() == [[7.0, 7.0]] and np.array(weight).tolist() == [[0.0]]
    rows, weight = run(lambda: L.filter_by_instag(
        fluid.data("ins", [3, 2], "float64"), fluid.data("tags", [3, 1], "int64"),
        fluid.data("f", [1], "int64"), False), {"ins": ins[:3], "tags": tags[:3],
                                                "f": np.array([2], "int64")})
    np.testing.assert_allclose(np.array(rows), ins[2:3])
    assert np.array(weight).tolist() == [[1.0]] and np.array(weight).dtype == np.float64
    with pytest.raises(TypeError, match="filter_by_instag: ins_tag 't' must be int64"):
        build_only(lambda: L.filter_by_instag(fluid.data("i", [3, 2]), fluid.data("t", [3, 1]),
                                              fluid.data("f", [1], "int64"), False))


# ---- the attributes the new layers and their grad ops set match the op registry ----

def test_new_layers_attrs_match_the_registry(set_attrs):
    main, startup = fluid.Program(), fluid.Program()
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        x = fluid.data("x", [4, 6])
        x.stop_gradient = False
        img = fluid.data("img", [2, 3, 4, 4])
        img.stop_gradient = False
        seq = fluid.data("seq", [None, 6], lod_level=1)
        seq.stop_gradient = False
        ids = fluid.data("ids", [4, 1], "int64")
        lod_ids = fluid.data("lod_ids", [None, 1], "int64", lod_level=1)
        terms = [
            L.strided_slice(x, [1], [5], [0], [-2]),
            L.scatter_nd_add(x, ids, fluid.data("u", [4, 6])),
            L.scatter_nd(ids, x, [5, 6]),
            L.row_conv(seq, 2),
            L.im2sequence(img, 2, 1, 1),
            L.add_position_encoding(seq, 0.5, 0.5),
            L.bilinear_tensor_product(x, x, 3),
            L.bpr_loss(x, ids),
            L.dice_loss(L.softmax(x), ids),
            L.npair_loss(x, x, fluid.data("nl", [4], "int64")),
            L.center_loss(x, ids, 3, 0.1, None),
            L.teacher_student_sigmoid_loss(L.reduce_sum(x, dim=1, keep_dim=True),
                                           fluid.data("tl", [4, 1])),
            L.fsp_matrix(img, img),
            L.sequence_scatter(x, lod_ids, fluid.data("su", [None, 1], lod_level=1)),
            L.continuous_value_model(x, fluid.data("cvm", [4, 2])),
            L.filter_by_instag(seq, lod_ids, fluid.data("f", [1], "int64"), True)[0],
            L.lod_append(seq, [0, 1]),
        ]
        fluid.backward.append_backward(L.sums([L.reduce_sum(t) for t in terms]))
        L.unique_with_counts(fluid.data("u1", [5], "int64"))
        L.edit_distance(lod_ids, lod_ids, ignored_tokens=[0])
        L.ctc_greedy_decoder(seq, 0)
        L.shard_index(ids, 20, 2, 1)
        L.hash(ids, 100, 2)
        L.sampling_id(x, seed=1)
        L.mean_iou(ids, ids, 3)
        L.similarity_focus(img, 1, [0])
    check(set_attrs, [("main", main), ("startup", startup)], "the new layers")


def test_training_through_sequence_layers_decreases_loss():
    rng = np.random.RandomState(1)
    img = rng.rand(8, 1, 4, 4).astype("float32")
    label = (img.mean(axis=(1, 2, 3)) > 0.5).astype("int64").reshape(8, 1)
    soft = np.where(label == 1, 1.5, 0.5).astype("float32")  # click and teacher scores
    main, startup = fluid.Program(), fluid.Program()
    main.random_seed = startup.random_seed = 5
    with fluid.program_guard(main, startup), fluid.unique_name.guard():
        iv = fluid.data("img", [8, 1, 4, 4])
        lv = fluid.data("label", [8, 1], "int64")
        sv = fluid.data("soft", [8, 1])
        patches = L.im2sequence(iv, filter_size=2, stride=2)  # 4 rows per image
        h = L.row_conv(L.fc(patches, 6, act="tanh"), 1)
        pooled = L.sequence_pool(h, "average")
        probs = L.fc(pooled, 2, act="softmax")
        logit = L.fc(pooled, 1)
        loss = L.elementwise_add(L.dice_loss(probs, lv), L.mean(
            L.teacher_student_sigmoid_loss(logit, sv)))
        fluid.optimizer.Adam(0.05).minimize(loss)
    exe, scope = fluid.Executor(fluid.CPUPlace()), fluid.Scope()
    exe.run(startup, scope=scope)
    feed = {"img": img, "label": label, "soft": soft}
    losses = [float(np.array(exe.run(main, feed=feed, fetch_list=[loss], scope=scope)[0]).sum())
              for _ in range(40)]
    assert losses[-1] < 0.8 * losses[0], losses
