"""More losses and metrics of Fluid 1.8: bpr_loss, dice_loss, npair_loss, center_loss,
teacher_student_sigmoid_loss, mean_iou and fsp_matrix. Those Fluid writes as compositions of
other layers are the same compositions here."""
from ..framework import Variable, convert_dtype
from ..layer_helper import LayerHelper
from .activation import softplus, square
from .common import _check_var
from .control_flow import equal
from .loss import softmax_with_cross_entropy
from .math import (elementwise_add, elementwise_div, elementwise_mul, elementwise_sub, matmul,
                   reduce_mean, reduce_sum, scale)
from .tensor import cast, create_global_var, expand, one_hot, reshape, transpose

__all__ = ["bpr_loss", "dice_loss", "npair_loss", "center_loss", "teacher_student_sigmoid_loss",
           "mean_iou", "fsp_matrix"]


def _is_int(x):
    return convert_dtype(x.dtype) in (convert_dtype("int32"), convert_dtype("int64"))


def _one_hot_like(label, depth, dtype):
    """one_hot of label [..., 1] in dtype (one_hot itself gives float32)."""
    oh = one_hot(label, depth)
    return oh if convert_dtype(dtype) == convert_dtype("float32") else cast(oh, dtype)


def bpr_loss(input, label, name=None):
    """Bayesian personalized ranking, [batch, 1]: for scores input [batch, C] and the positive
    class label [batch, 1], the mean over the other classes j of -log(sigmoid(input[label] -
    input[j]))."""
    _check_var(input, "input", "bpr_loss")
    _check_var(label, "label", "bpr_loss")
    if len(input.shape) != 2 or input.shape[1] < 2:
        raise ValueError("bpr_loss: input '%s' must be [batch, C] with a static C >= 2, got %r"
                         % (input.name, list(input.shape)))
    if not _is_int(label) or len(label.shape) != 2:
        raise TypeError("bpr_loss: label '%s' must be int32 / int64 [batch, 1]" % label.name)
    classes = input.shape[1]
    oh = _one_hot_like(label, classes, input.dtype)
    positive = reduce_sum(elementwise_mul(input, oh), dim=1)
    # -log(sigmoid(p - x_j)) = softplus(x_j - p); the positive class itself is masked out.
    terms = elementwise_mul(softplus(elementwise_sub(input, positive, axis=0)),
                            scale(oh, scale=-1.0, bias=1.0))
    return scale(reduce_sum(terms, dim=1, keep_dim=True), scale=1.0 / (classes - 1))


def dice_loss(input, label, epsilon=0.00001, name=None):
    """The mean over the batch of 1 - 2 |input . one_hot(label)| / (|input| + |one_hot(label)|
    + epsilon), the sums over every dim but the first (input holds class probabilities in its
    last dim, label the class ids [..., 1])."""
    _check_var(input, "input", "dice_loss")
    _check_var(label, "label", "dice_loss")
    if not _is_int(label):
        raise TypeError("dice_loss: label '%s' must be int32 / int64 class ids" % label.name)
    if len(label.shape) != len(input.shape) or label.shape[-1] != 1:
        raise ValueError("dice_loss: label %r must be input's shape %r with a last dim of 1"
                         % (list(label.shape), list(input.shape)))
    oh = _one_hot_like(label, input.shape[-1], input.dtype)
    dims = list(range(1, len(input.shape)))
    inse = reduce_sum(elementwise_mul(input, oh), dim=dims)
    denominator = elementwise_add(reduce_sum(input, dim=dims), reduce_sum(oh, dim=dims))
    score = scale(elementwise_div(scale(inse, scale=2.0), scale(denominator, bias=epsilon)),
                  scale=-1.0, bias=1.0)
    return reduce_mean(score)


def npair_loss(anchor, positive, labels, l2_reg=0.002):
    """The N-pair loss (Sohn, NIPS 2016), as Fluid computes it: a soft-label softmax cross
    entropy of anchor . positive^T against the same-label matrix (rows normalized), plus
    l2_reg * 0.25 * the mean squared norms of anchor and positive."""
    for what, v in (("anchor", anchor), ("positive", positive), ("labels", labels)):
        _check_var(v, what, "npair_loss")
    if len(anchor.shape) != 2 or len(positive.shape) != 2:
        raise ValueError("npair_loss: anchor and positive must be [batch, D], got %r and %r"
                         % (list(anchor.shape), list(positive.shape)))
    batch = labels.shape[0]
    if batch is None or batch < 0:
        raise ValueError("npair_loss: labels '%s' needs a static batch size, got %r"
                         % (labels.name, list(labels.shape)))
    labels = expand(reshape(labels, [batch, 1]), [1, batch])
    same = cast(equal(labels, transpose(labels, [1, 0])), anchor.dtype)
    same = elementwise_div(same, reduce_sum(same, dim=1, keep_dim=True), axis=0)
    l2 = elementwise_add(reduce_mean(reduce_sum(square(anchor), dim=1)),
                         reduce_mean(reduce_sum(square(positive), dim=1)))
    l2 = scale(l2, scale=0.25 * l2_reg)
    similarity = matmul(anchor, positive, transpose_y=True)
    ce = softmax_with_cross_entropy(similarity, same, soft_label=True)
    ce = reduce_mean(reduce_sum(elementwise_mul(same, reshape(ce, [batch]), axis=0), dim=0))
    return elementwise_add(l2, ce)


def center_loss(input, label, num_classes, alpha, param_attr, update_center=True):
    """[batch, 1]: 0.5 * ||input[i] - center[label[i]]||^2 with the class centers a parameter
    [num_classes, D] that takes no gradient; with update_center each step also moves every
    center toward its samples at rate alpha (a float or a [1] Variable)."""
    _check_var(input, "input", "center_loss")
    _check_var(label, "label", "center_loss")
    if len(input.shape) != 2 or input.shape[1] <= 0:
        raise ValueError("center_loss: input '%s' must be [batch, D] with a static D, got %r"
                         % (input.name, list(input.shape)))
    if not _is_int(label):
        raise TypeError("center_loss: label '%s' must be int32 / int64 [batch, 1]" % label.name)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError("center_loss: num_classes must be an int >= 1, got %r" % (num_classes,))
    helper = LayerHelper("center_loss")
    centers = helper.create_parameter(param_attr, [num_classes, input.shape[1]], input.dtype)
    centers.stop_gradient = True
    if isinstance(alpha, Variable):
        rate = alpha
    else:
        rate = create_global_var([1], float(alpha), input.dtype, persistable=True,
                                 name=helper.name + ".alpha")
    diff = helper.create_variable_for_type_inference(input.dtype, stop_gradient=True)
    loss = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("center_loss", inputs={"X": input, "Label": label, "Centers": centers,
                                            "CenterUpdateRate": rate},
                     outputs={"SampleCenterDiff": diff, "Loss": loss, "CentersOut": centers},
                     attrs={"cluster_num": num_classes, "need_update": bool(update_center)})
    return loss


def teacher_student_sigmoid_loss(input, label, soft_max_up_bound=15.0,
                                 soft_max_lower_bound=-15.0):
    """[batch, 1] sigmoid cross entropies of the logits input [batch, 1] against the click and
    the teacher's score that label encodes (< -1: no click; [-1, 0): click; [0, 1): no click,
    score label; >= 1: click, score label - 1)."""
    _check_var(input, "input", "teacher_student_sigmoid_loss")
    _check_var(label, "label", "teacher_student_sigmoid_loss")
    if not soft_max_lower_bound < soft_max_up_bound:
        raise ValueError("teacher_student_sigmoid_loss: soft_max_lower_bound (%r) must be below "
                         "soft_max_up_bound (%r)" % (soft_max_lower_bound, soft_max_up_bound))
    helper = LayerHelper("teacher_student_sigmoid_loss")
    out = helper.create_variable_for_type_inference(input.dtype)
    helper.append_op("teacher_student_sigmoid_loss", inputs={"X": input, "Label": label},
                     outputs={"Y": out},
                     attrs={"soft_max_up_bound": float(soft_max_up_bound),
                            "soft_max_lower_bound": float(soft_max_lower_bound)})
    return out


def mean_iou(input, label, num_classes):
    """(float32 [1] the mean IoU over the classes present, int32 [num_classes] wrong counts,
    int32 [num_classes] correct counts) of the predicted classes input against label."""
    _check_var(input, "input", "mean_iou")
    _check_var(label, "label", "mean_iou")
    if not _is_int(input) or not _is_int(label):
        raise TypeError("mean_iou: input '%s' and label '%s' must be int32 / int64 classes"
                        % (input.name, label.name))
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError("mean_iou: num_classes must be an int >= 1, got %r" % (num_classes,))
    helper = LayerHelper("mean_iou")
    miou = helper.create_variable_for_type_inference("float32", stop_gradient=True)
    wrong = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    correct = helper.create_variable_for_type_inference("int32", stop_gradient=True)
    helper.append_op("mean_iou", inputs={"Predictions": input, "Labels": label},
                     outputs={"OutMeanIou": miou, "OutWrong": wrong, "OutCorrect": correct},
                     attrs={"num_classes": num_classes})
    return miou, wrong, correct


def fsp_matrix(x, y):
    """The flow-of-solution-procedure matrix [N, C1, C2] of feature maps x [N, C1, H, W] and
    y [N, C2, H, W]: x . y^T over the H * W positions, divided by H * W."""
    _check_var(x, "x", "fsp_matrix")
    _check_var(y, "y", "fsp_matrix")
    if len(x.shape) != 4 or len(y.shape) != 4 or list(x.shape[2:]) != list(y.shape[2:]):
        raise ValueError("fsp_matrix: x and y must be [N, C, H, W] of the same H, W, got %r "
                         "and %r" % (list(x.shape), list(y.shape)))
    if any(d is None or d <= 0 for d in list(x.shape[1:]) + list(y.shape[1:2])):
        raise ValueError("fsp_matrix: x %r and y %r need static C, H, W"
                         % (list(x.shape), list(y.shape)))
    hw = x.shape[2] * x.shape[3]
    xr = reshape(x, [0, x.shape[1], hw])
    yr = reshape(y, [0, y.shape[1], hw])
    return matmul(xr, yr, transpose_y=True, alpha=1.0 / hw)
