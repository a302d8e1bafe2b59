"""Fluid layers built from other layers (no op of their own): losses, normalizations and
reshapes with Fluid 1.8's formulas. Imported into fluid.layers."""
from . import layers as L
from .layer_helper import LayerHelper


def ones_like(x, out=None):
    """Ones with x's dims and dtype."""
    return L.scale(L.zeros_like(x), scale=0.0, bias=1.0)


def reduce_min(input, dim=None, keep_dim=False, name=None):
    return L.scale(L.reduce_max(L.scale(input, -1.0), dim, keep_dim), -1.0)


def mse_loss(input, label):
    """mean((input - label)^2)."""
    return L.mean(L.square(L.elementwise_sub(input, label)))


def l2_normalize(x, axis, epsilon=1e-12, name=None):
    """x / sqrt(max(sum(x^2 along axis), epsilon))."""
    axis = axis % len(x.shape)
    if x.shape[axis] <= 0:
        raise ValueError("l2_normalize: dim %d of %r must be static" % (axis, list(x.shape)))
    sq = L.reduce_sum(L.square(x), dim=axis, keep_dim=True)
    norm = L.sqrt(L.elementwise_max(sq, L.fill_constant([1], x.dtype, float(epsilon))))
    # The norm tiled back along axis, so the division needs no broadcast.
    times = [x.shape[axis] if i == axis else 1 for i in range(len(x.shape))]
    return L.elementwise_div(x, L.expand(norm, times))


def huber_loss(input, label, delta):
    """0.5 r^2 where |r| <= delta, else delta (|r| - 0.5 delta); r = label - input."""
    r = L.elementwise_sub(label, input)
    a = L.abs(r)
    d = float(delta)
    small = L.cast(L.less_equal(a, L.fill_constant([1], input.dtype, d)), input.dtype)
    quad = L.scale(L.square(r), 0.5)
    lin = L.scale(a, d, bias=-0.5 * d * d)
    return L.elementwise_add(L.elementwise_mul(quad, small),
                             L.elementwise_mul(lin, L.scale(small, -1.0, bias=1.0)))


def smooth_l1(x, y, inside_weight=None, outside_weight=None, sigma=None):
    """Per sample (row), the sum of 0.5 (sigma d)^2 where |d| < 1 / sigma^2, else |d| - 0.5 /
    sigma^2, with d = (x - y) * inside_weight, each term times outside_weight: [N, 1]."""
    s2 = float(sigma or 1.0) ** 2
    d = L.elementwise_sub(x, y)
    if inside_weight is not None:
        d = L.elementwise_mul(d, inside_weight)
    a = L.abs(d)
    small = L.cast(L.less_than(a, L.fill_constant([1], x.dtype, 1.0 / s2)), x.dtype)
    val = L.elementwise_add(
        L.elementwise_mul(L.scale(L.square(d), 0.5 * s2), small),
        L.elementwise_mul(L.scale(a, 1.0, bias=-0.5 / s2), L.scale(small, -1.0, bias=1.0)))
    if outside_weight is not None:
        val = L.elementwise_mul(val, outside_weight)
    dims = list(range(1, len(x.shape)))
    return L.reduce_sum(val, dim=dims, keep_dim=False) if len(dims) != 1 else \
        L.reduce_sum(val, dim=1, keep_dim=True)


def log_loss(input, label, epsilon=1e-4, name=None):
    """-label log(input + eps) - (1 - label) log(1 - input + eps)."""
    eps = float(epsilon)
    pos = L.elementwise_mul(label, L.log(L.scale(input, 1.0, bias=eps)))
    neg = L.elementwise_mul(L.scale(label, -1.0, bias=1.0),
                            L.log(L.scale(input, -1.0, bias=1.0 + eps)))
    return L.scale(L.elementwise_add(pos, neg), -1.0)


def margin_rank_loss(label, left, right, margin=0.1, name=None):
    """max(0, -label (left - right) + margin)."""
    diff = L.elementwise_mul(L.elementwise_sub(left, right), label)
    return L.relu(L.scale(diff, -1.0, bias=float(margin)))


def rank_loss(label, left, right, name=None):
    """log(1 + exp(left - right)) - label (left - right)."""
    d = L.elementwise_sub(left, right)
    return L.elementwise_sub(L.softplus(d), L.elementwise_mul(label, d))


def kldiv_loss(x, target, reduction="mean", name=None):
    """target (log target - x) (0 where target is 0), reduced by reduction: none, sum, mean or
    batchmean (sum / batch size)."""
    if reduction not in ("none", "sum", "mean", "batchmean"):
        raise ValueError("kldiv_loss: reduction %r is not none, sum, mean or batchmean"
                         % (reduction,))
    safe = L.elementwise_max(target, L.fill_constant([1], target.dtype, 1e-30))
    loss = L.elementwise_mul(target, L.elementwise_sub(L.log(safe), x))
    if reduction == "none":
        return loss
    if reduction == "mean":
        return L.mean(loss)
    total = L.reduce_sum(loss)
    if reduction == "sum":
        return total
    return L.elementwise_div(total, L.cast(L.slice(L.shape(x), [0], [0], [1]), x.dtype))


def prelu(x, mode, param_attr=None, name=None):
    """max(0, x) + alpha min(0, x) with alpha one value (mode "all"), one per channel
    ("channel", dim 1) or one per element ("element")."""
    if mode not in ("all", "channel", "element"):
        raise ValueError("prelu: mode %r is not all, channel or element" % (mode,))
    from .initializer import ConstantInitializer
    shape = {"all": [1], "channel": [x.shape[1]], "element": list(x.shape[1:])}[mode]
    if any(s <= 0 for s in shape):
        raise ValueError("prelu: mode %r needs static dims, input is %r" % (mode,
                                                                            list(x.shape)))
    helper = LayerHelper("prelu", name=name)
    alpha = helper.create_parameter(param_attr, shape, x.dtype,
                                    default_initializer=ConstantInitializer(0.25))
    neg = L.scale(L.relu(L.scale(x, -1.0)), -1.0)  # min(0, x)
    axis = {"all": -1, "channel": 1, "element": 1}[mode]
    return L.elementwise_add(L.relu(x), L.elementwise_mul(neg, alpha, axis=axis))


def maxout(x, groups, name=None, axis=1):
    """Channel groups of `groups` reduced by max: [N, C, ...] -> [N, C / groups, ...]."""
    c = x.shape[axis]
    if c <= 0 or c % groups:
        raise ValueError("maxout: channels %d are not divisible by groups %d" % (c, groups))
    shape = [0 if i < axis else d for i, d in enumerate(x.shape)]
    shape = shape[:axis] + [c // groups, groups] + [d for d in x.shape[axis + 1:]]
    return L.reduce_max(L.reshape(x, shape), dim=axis + 1)


def pixel_shuffle(x, upscale_factor):
    """[N, C r^2, H, W] -> [N, C, H r, W r]."""
    r = int(upscale_factor)
    n, c, h, w = x.shape
    if c <= 0 or c % (r * r) or h <= 0 or w <= 0:
        raise ValueError("pixel_shuffle: input %r needs static C divisible by %d and static H, W"
                         % (list(x.shape), r * r))
    y = L.reshape(x, [-1, c // (r * r), r, r, h, w])
    y = L.transpose(y, [0, 1, 4, 2, 5, 3])
    return L.reshape(y, [-1, c // (r * r), h * r, w * r])


def unstack(x, axis=0, num=None):
    """The slices of x along axis, each without that dim."""
    n = num if num is not None else x.shape[axis]
    if n is None or n <= 0:
        raise ValueError("unstack: the length of axis %d must be static or given as num" % axis)
    return [L.squeeze(p, [axis]) for p in L.split(x, int(n), dim=axis)]


def expand_as(x, target_tensor, name=None):
    """x tiled to target_tensor's (static) dims."""
    times = []
    for a, b in zip(x.shape, target_tensor.shape):
        if a <= 0 or b <= 0 or b % a:
            raise ValueError("expand_as: %r does not tile to %r" % (list(x.shape),
                                                                   list(target_tensor.shape)))
        times.append(b // a)
    return L.expand(x, times)


def has_nan(x):
    """A one-element bool: whether x holds a NaN."""
    nan = L.cast(L.not_equal(x, x), "float32")
    return L.greater_than(L.reduce_max(nan), L.fill_constant([1], "float32", 0.5))


def has_inf(x):
    """A one-element bool: whether x holds an infinity."""
    inf = L.cast(L.equal(L.abs(x), L.fill_constant([1], x.dtype, float("inf"))), "float32")
    return L.greater_than(L.reduce_max(inf), L.fill_constant([1], "float32", 0.5))


def isfinite(x):
    """A one-element bool: whether every element of x is finite."""
    return L.logical_not(L.logical_or(has_nan(x), has_inf(x)))


def rank(input):
    """The number of dims of input, as a one-element int32 tensor."""
    return L.fill_constant([1], "int32", len(input.shape))


def elementwise_floordiv(x, y, axis=-1, act=None, name=None):
    """floor(x / y) (computed in float64 for integer inputs)."""
    return _int_safe(lambda a, b: L.floor(L.elementwise_div(a, b, axis=axis)), x, y)


def elementwise_mod(x, y, axis=-1, act=None, name=None):
    """x - floor(x / y) y: the remainder with y's sign (computed in float64 for integers)."""
    def mod(a, b):
        q = L.floor(L.elementwise_div(a, b, axis=axis))
        return L.elementwise_sub(a, L.elementwise_mul(q, b, axis=axis))
    return _int_safe(mod, x, y)


def _int_safe(fn, x, y):
    from . import core
    if int(x.dtype) in (int(core.DataType.INT32), int(core.DataType.INT64)):
        return L.cast(fn(L.cast(x, "float64"), L.cast(y, "float64")), x.dtype)
    return fn(x, y)


def autoincreased_step_counter(counter_name=None, begin=1, step=1):
    """A persistable int64 counter that is `begin` on the first run and grows by step each run
    (created once per program and name)."""
    from .framework import default_main_program
    name = counter_name or "@STEP_COUNTER@"
    block = default_main_program().global_block()
    if block.has_var(name):
        return block.var(name)
    counter = L.create_global_var([1], int(begin) - int(step), "int64", persistable=True,
                                  name=name)
    L.increment(counter, float(step))
    counter.stop_gradient = True
    return counter


def create_tensor(dtype, name=None, persistable=False):
    """A variable to assign to later (no op)."""
    from . import unique_name
    from .framework import default_main_program
    return default_main_program().global_block().create_var(
        name=name or unique_name.generate("create_tensor"), dtype=dtype, persistable=persistable)


def size(input):
    """The number of elements of input (its dims must be static), as a one-element int64."""
    n = 1
    for d in input.shape:
        if d < 0:
            raise ValueError("size: '%s' has a dynamic dim %r" % (input.name, list(input.shape)))
        n *= d
    return L.fill_constant([1], "int64", n)


def double_buffer(reader, place=None, name=None):
    """Accepted; Loom's DataLoader already prepares batches ahead on a thread."""
    return reader


def crop_tensor(x, shape=None, offsets=None, name=None):
    """The block of x at offsets (default 0) of the given shape (-1: to the end)."""
    if shape is None:
        raise ValueError("crop_tensor: shape is required")
    offsets = list(offsets or [0] * len(x.shape))
    if len(shape) != len(x.shape) or len(offsets) != len(x.shape):
        raise ValueError("crop_tensor: shape and offsets need one entry per dim of %r"
                         % (list(x.shape),))
    axes, starts, ends = [], [], []
    for a, (n, o) in enumerate(zip(shape, offsets)):
        if n == -1 and o == 0:
            continue
        axes.append(a)
        starts.append(int(o))
        ends.append(int(o + n) if n != -1 else 2 ** 31 - 1)
    return L.slice(x, axes=axes, starts=starts, ends=ends) if axes else x


def crop(x, shape=None, offsets=None, name=None):
    """Fluid's crop: shape may be a list or a Variable whose (static) shape is taken."""
    from .framework import Variable
    if isinstance(shape, Variable):
        shape = list(shape.shape)
    return crop_tensor(x, shape, offsets)


def pad(x, paddings, pad_value=0.0, name=None):
    """x padded with pad_value: paddings = [before_0, after_0, before_1, after_1, ...] (static
    dims where padding is added)."""
    if len(paddings) != 2 * len(x.shape):
        raise ValueError("pad: %d paddings for %d dims (two per dim)" % (len(paddings),
                                                                         len(x.shape)))
    out = x
    for a in range(len(x.shape)):
        before, after = int(paddings[2 * a]), int(paddings[2 * a + 1])
        if before == 0 and after == 0:
            continue
        dims = list(out.shape)
        if any(d < 0 for i, d in enumerate(dims) if i != a) and a != 0:
            raise ValueError("pad: padding dim %d needs the other dims static, got %r"
                             % (a, dims))
        parts = []
        for n in (before, after):
            if n:
                shape = list(dims)
                shape[a] = n
                if shape[0] < 0:
                    parts.append(L.fill_constant_batch_size_like(out, shape, out.dtype,
                                                                 pad_value))
                else:
                    parts.append(L.fill_constant(shape, out.dtype, pad_value))
            else:
                parts.append(None)
        pieces = [p for p in (parts[0], out, parts[1]) if p is not None]
        out = L.concat(pieces, axis=a)
    return out


def pad_constant_like(x, y, pad_value=0.0, name=None):
    """y padded at the end of each dim with pad_value to x's (static) dims."""
    paddings = []
    for a, (dx, dy) in enumerate(zip(x.shape, y.shape)):
        if dx < 0 or dy < 0:
            if dx == dy:
                paddings += [0, 0]
                continue
            raise ValueError("pad_constant_like: dim %d must be static" % a)
        if dy > dx:
            raise ValueError("pad_constant_like: y is larger than x in dim %d" % a)
        paddings += [0, dx - dy]
    return pad(y, paddings, pad_value)


def multiplex(inputs, index):
    """Row i of the result = row i of inputs[index[i]] (index: int [N, 1])."""
    k = len(inputs)
    onehot = L.cast(L.one_hot(index, k), inputs[0].dtype)  # [N, k]
    out = None
    for j, x in enumerate(inputs):
        w = L.slice(onehot, axes=[1], starts=[j], ends=[j + 1])  # [N, 1]
        term = L.elementwise_mul(x, L.squeeze(w, [1]), axis=0)
        out = term if out is None else L.elementwise_add(out, term)
    return out


def _tile_to(v, like):
    """v ([..., 1, ...]) tiled along its size-1 dims to like's static dims."""
    times = []
    for a, b in zip(v.shape, like.shape):
        times.append(b if a == 1 and b > 1 else 1)
    return L.expand(v, times) if any(t > 1 for t in times) else v


def _normalize(x, dims, epsilon):
    mean = L.reduce_mean(x, dim=dims, keep_dim=True)
    centered = L.elementwise_sub(x, _tile_to(mean, x))
    var = L.reduce_mean(L.square(centered), dim=dims, keep_dim=True)
    std = L.sqrt(L.scale(var, 1.0, bias=float(epsilon)))
    return L.elementwise_div(centered, _tile_to(std, x))


def _affine(x, param_attr, bias_attr, name, c):
    from .initializer import ConstantInitializer
    helper = LayerHelper(name)
    scale = helper.create_parameter(param_attr, [c], x.dtype,
                                    default_initializer=ConstantInitializer(1.0))
    bias = helper.create_parameter(bias_attr, [c], x.dtype, is_bias=True)
    out = x
    if scale is not None:
        out = L.elementwise_mul(out, scale, axis=1)
    if bias is not None:
        out = L.elementwise_add(out, bias, axis=1)
    return out


def instance_norm(input, epsilon=1e-05, param_attr=None, bias_attr=None, name=None):
    """Each (sample, channel) plane normalized over its H x W, then a per-channel scale and
    bias (static C, H, W)."""
    if len(input.shape) != 4 or any(d <= 0 for d in input.shape[1:]):
        raise ValueError("instance_norm: input must be [N, C, H, W] with static C, H, W, got %r"
                         % (list(input.shape),))
    return _affine(_normalize(input, [2, 3], epsilon), param_attr, bias_attr,
                   name or "instance_norm", input.shape[1])


def group_norm(input, groups, epsilon=1e-05, param_attr=None, bias_attr=None, act=None,
               data_layout="NCHW", name=None):
    """The channels in `groups` groups, each group of a sample normalized over its channels
    and positions, then a per-channel scale and bias (static C, H, W)."""
    if data_layout != "NCHW":
        raise NotImplementedError("group_norm: data_layout %r (NCHW only)" % (data_layout,))
    n, c = input.shape[0], input.shape[1]
    rest = list(input.shape[2:])
    if c <= 0 or c % groups or any(d <= 0 for d in rest):
        raise ValueError("group_norm: channels %d must be static and divisible by groups %d, "
                         "and the other dims static: %r" % (c, groups, list(input.shape)))
    x = L.reshape(input, [0, groups, -1])
    x = L.reshape(_normalize(x, [2], epsilon), [0, c] + rest)
    out = _affine(x, param_attr, bias_attr, name or "group_norm", c)
    return getattr(L, act)(out) if act else out


def lrn(input, n=5, k=1.0, alpha=1e-4, beta=0.75, name=None):
    """Local response normalization across channels: x / (k + alpha * the sum of x^2 over the
    n channels around each) ^ beta (static C)."""
    c = input.shape[1]
    if c <= 0:
        raise ValueError("lrn: the channel dim must be static")
    sq = L.square(input)
    half = (n - 1) // 2
    padded = pad(sq, [0, 0, half, n - 1 - half] + [0, 0] * (len(input.shape) - 2))
    total = None
    for s in range(n):
        part = L.slice(padded, axes=[1], starts=[s], ends=[s + c])
        total = part if total is None else L.elementwise_add(total, part)
    denom = L.pow(L.scale(total, float(alpha), bias=float(k)), factor=float(beta))
    return L.elementwise_div(input, denom)
