"""Fluid's fluid.nets: composite layers built from fluid.layers."""
from . import layers

__all__ = ["simple_img_conv_pool", "img_conv_group", "glu", "scaled_dot_product_attention",
           "sequence_conv_pool"]


def simple_img_conv_pool(input, num_filters, filter_size, pool_size, pool_stride,
                         pool_padding=0, pool_type="max", global_pooling=False, conv_stride=1,
                         conv_padding=0, conv_dilation=1, conv_groups=1, param_attr=None,
                         bias_attr=None, act=None, use_cudnn=True):
    """conv2d (with act) then pool2d."""
    conv = layers.conv2d(input, num_filters, filter_size, stride=conv_stride,
                         padding=conv_padding, dilation=conv_dilation, groups=conv_groups,
                         param_attr=param_attr, bias_attr=bias_attr, act=act)
    return layers.pool2d(conv, pool_size=pool_size, pool_type=pool_type,
                         pool_stride=pool_stride, pool_padding=pool_padding,
                         global_pooling=global_pooling)


def img_conv_group(input, conv_num_filter, pool_size, conv_padding=1, conv_filter_size=3,
                   conv_act=None, param_attr=None, conv_with_batchnorm=False,
                   conv_batchnorm_drop_rate=0.0, pool_stride=1, pool_type="max",
                   use_cudnn=True):
    """len(conv_num_filter) convolutions (each optionally batch-normed, then dropout), then
    one pool2d: the VGG block. Per-conv arguments may be single values or lists."""
    n = len(conv_num_filter)

    def per_conv(v):
        if isinstance(v, (list, tuple)):
            if len(v) != n:
                raise ValueError("img_conv_group: %r has %d entries for %d convolutions"
                                 % (v, len(v), n))
            return list(v)
        return [v] * n

    pads, sizes = per_conv(conv_padding), per_conv(conv_filter_size)
    attrs, with_bn = per_conv(param_attr), per_conv(conv_with_batchnorm)
    drops = per_conv(conv_batchnorm_drop_rate)
    tmp = input
    for i in range(n):
        act = None if with_bn[i] else conv_act
        tmp = layers.conv2d(tmp, conv_num_filter[i], sizes[i], padding=pads[i],
                            param_attr=attrs[i], act=act)
        if with_bn[i]:
            tmp = layers.batch_norm(tmp, act=conv_act)
            if abs(drops[i]) > 1e-5:
                tmp = layers.dropout(tmp, dropout_prob=drops[i])
    return layers.pool2d(tmp, pool_size=pool_size, pool_type=pool_type, pool_stride=pool_stride)


def glu(input, dim=-1):
    """Gated linear unit: a * sigmoid(b) for the two halves a, b of input along dim."""
    a, b = layers.split(input, num_or_sections=2, dim=dim)
    return layers.elementwise_mul(a, layers.sigmoid(b))


def scaled_dot_product_attention(queries, keys, values, num_heads=1, dropout_rate=0.0):
    """softmax(Q K^T / sqrt(d)) V over num_heads heads ([batch, len, width] inputs; the widths
    of queries and keys equal and divisible by num_heads)."""
    for name, v in (("queries", queries), ("keys", keys), ("values", values)):
        if len(v.shape) != 3:
            raise ValueError("scaled_dot_product_attention: %s must be 3-D [batch, len, width], "
                             "got %r" % (name, list(v.shape)))
    if queries.shape[-1] != keys.shape[-1]:
        raise ValueError("scaled_dot_product_attention: queries and keys differ in width "
                         "(%d vs %d)" % (queries.shape[-1], keys.shape[-1]))
    if keys.shape[1] != values.shape[1]:
        raise ValueError("scaled_dot_product_attention: keys and values differ in length")
    for name, v in (("queries", queries), ("values", values)):
        if v.shape[-1] % num_heads:
            raise ValueError("scaled_dot_product_attention: the width of %s (%d) is not "
                             "divisible by num_heads (%d)" % (name, v.shape[-1], num_heads))

    def split_heads(x):
        if num_heads == 1:
            return x
        w = x.shape[-1]
        x = layers.reshape(x, [0, 0, num_heads, w // num_heads])
        return layers.transpose(x, [0, 2, 1, 3])

    def combine_heads(x):
        if num_heads == 1:
            return x
        x = layers.transpose(x, [0, 2, 1, 3])
        return layers.reshape(x, [0, 0, x.shape[2] * x.shape[3]])

    q, k, v = split_heads(queries), split_heads(keys), split_heads(values)
    d = keys.shape[-1] // num_heads
    scores = layers.matmul(q, k, transpose_y=True, alpha=d ** -0.5)
    weights = layers.softmax(scores)
    if dropout_rate:
        weights = layers.dropout(weights, dropout_prob=dropout_rate, is_test=False)
    return combine_heads(layers.matmul(weights, v))


def sequence_conv_pool(input, num_filters, filter_size, param_attr=None, act="sigmoid",
                       pool_type="max", bias_attr=None):
    """sequence_conv (with act) then sequence_pool over LoD sequences."""
    conv = layers.sequence_conv(input, num_filters, filter_size, param_attr=param_attr,
                                bias_attr=bias_attr, act=act)
    return layers.sequence_pool(conv, pool_type)
