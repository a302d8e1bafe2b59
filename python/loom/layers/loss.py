"""Losses: cross entropies, squared and robust errors, ranking losses and KL divergence."""
from ..layer_helper import LayerHelper
from .activation import abs, log, relu, softplus, square
from .control_flow import less_equal, less_than
from .math import (elementwise_add, elementwise_div, elementwise_max, elementwise_mul,
                   elementwise_sub, mean, reduce_sum, scale)
from .tensor import cast, fill_constant, shape, slice

__all__ = ["softmax_with_cross_entropy", "cross_entropy", "sigmoid_cross_entropy_with_logits",
           "square_error_cost", "mse_loss", "huber_loss", "smooth_l1", "log_loss",
           "margin_rank_loss", "rank_loss", "kldiv_loss"]


def softmax_with_cross_entropy(logits, label, soft_label=False, ignore_index=-100,
                               numeric_stable_mode=True, return_softmax=False, axis=-1):
    helper = LayerHelper("softmax_with_cross_entropy")
    softmax_out = helper.create_variable_for_type_inference(logits.dtype)
    loss = helper.create_variable_for_type_inference(logits.dtype)
    helper.append_op("softmax_with_cross_entropy", inputs={"Logits": logits, "Label": label},
                     outputs={"Softmax": softmax_out, "Loss": loss},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index,
                            "axis": axis})
    return (loss, softmax_out) if return_softmax else loss


def cross_entropy(input, label, soft_label=False, ignore_index=-100):
    helper = LayerHelper("cross_entropy")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("cross_entropy", inputs={"X": input, "Label": label}, outputs={"Y": out},
                     attrs={"soft_label": soft_label, "ignore_index": ignore_index})
    return out


def sigmoid_cross_entropy_with_logits(x, label, ignore_index=-100, name=None, normalize=False):
    helper = LayerHelper("sigmoid_cross_entropy_with_logits", name=name)
    out = helper.create_variable_for_type_inference(x.dtype)
    helper.append_op("sigmoid_cross_entropy_with_logits", inputs={"X": x, "Label": label},
                     outputs={"Out": out},
                     attrs={"ignore_index": int(ignore_index), "normalize": bool(normalize)})
    return out


def square_error_cost(input, label):
    helper = LayerHelper("square_error_cost")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("square_error_cost", inputs={"X": input, "Y": label},
                     outputs={"Out": out})
    return out


def mse_loss(input, label):
    """mean((input - label)^2)."""
    return mean(square(elementwise_sub(input, label)))


def huber_loss(input, label, delta):
    """0.5 r^2 where |r| <= delta, else delta (|r| - 0.5 delta); r = label - input."""
    r = elementwise_sub(label, input)
    a = abs(r)
    d = float(delta)
    small = cast(less_equal(a, fill_constant([1], input.dtype, d)), input.dtype)
    quad = scale(square(r), 0.5)
    lin = scale(a, d, bias=-0.5 * d * d)
    return elementwise_add(elementwise_mul(quad, small),
                           elementwise_mul(lin, scale(small, -1.0, bias=1.0)))


def smooth_l1(x, y, inside_weight=None, outside_weight=None, sigma=None):
    """Per sample (row), the sum of 0.5 (sigma d)^2 where |d| < 1 / sigma^2, else |d| - 0.5 /
    sigma^2, with d = (x - y) * inside_weight, each term times outside_weight: [N, 1]."""
    s2 = float(sigma or 1.0) ** 2
    d = elementwise_sub(x, y)
    if inside_weight is not None:
        d = elementwise_mul(d, inside_weight)
    a = abs(d)
    small = cast(less_than(a, fill_constant([1], x.dtype, 1.0 / s2)), x.dtype)
    val = elementwise_add(
        elementwise_mul(scale(square(d), 0.5 * s2), small),
        elementwise_mul(scale(a, 1.0, bias=-0.5 / s2), scale(small, -1.0, bias=1.0)))
    if outside_weight is not None:
        val = elementwise_mul(val, outside_weight)
    dims = list(range(1, len(x.shape)))
    return reduce_sum(val, dim=dims, keep_dim=False) if len(dims) != 1 else \
        reduce_sum(val, dim=1, keep_dim=True)


def log_loss(input, label, epsilon=1e-4, name=None):
    """-label log(input + eps) - (1 - label) log(1 - input + eps)."""
    eps = float(epsilon)
    pos = elementwise_mul(label, log(scale(input, 1.0, bias=eps)))
    neg = elementwise_mul(scale(label, -1.0, bias=1.0), log(scale(input, -1.0, bias=1.0 + eps)))
    return scale(elementwise_add(pos, neg), -1.0)


def margin_rank_loss(label, left, right, margin=0.1, name=None):
    """max(0, -label (left - right) + margin)."""
    diff = elementwise_mul(elementwise_sub(left, right), label)
    return relu(scale(diff, -1.0, bias=float(margin)))


def rank_loss(label, left, right, name=None):
    """log(1 + exp(left - right)) - label (left - right)."""
    d = elementwise_sub(left, right)
    return elementwise_sub(softplus(d), elementwise_mul(label, d))


def kldiv_loss(x, target, reduction="mean", name=None):
    """target (log target - x) (0 where target is 0), reduced by reduction: none, sum, mean or
    batchmean (sum / batch size)."""
    if reduction not in ("none", "sum", "mean", "batchmean"):
        raise ValueError("kldiv_loss: reduction %r is not none, sum, mean or batchmean"
                         % (reduction,))
    safe = elementwise_max(target, fill_constant([1], target.dtype, 1e-30))
    loss = elementwise_mul(target, elementwise_sub(log(safe), x))
    if reduction == "none":
        return loss
    if reduction == "mean":
        return mean(loss)
    total = reduce_sum(loss)
    if reduction == "sum":
        return total
    return elementwise_div(total, cast(slice(shape(x), [0], [0], [1]), x.dtype))
