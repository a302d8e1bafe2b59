"""Normalizations with their own statistics and the AUC metric layer: data_norm,
spectral_norm and auc (Fluid 1.8's signatures and math)."""
from .. import unique_name
from ..framework import dtype_name
from ..layer_helper import LayerHelper
from .common import _check_var
from .tensor import create_global_var

__all__ = ["auc"]


def auc(input, label, curve="ROC", num_thresholds=2 ** 12 - 1, topk=1, slide_steps=1):
    """Streaming ROC AUC of binary predictions input [N, C] (the last column is the positive
    class' probability) for label [N, 1]: returns (auc_out, batch_auc_out, [batch_stat_pos,
    batch_stat_neg, stat_pos, stat_neg]). auc_out covers every batch run so far,
    batch_auc_out the last slide_steps batches; the four int64 persistable stat variables
    hold the bucket counts (num_thresholds + 1 buckets) and are zeroed by the startup
    program. The same buckets and formula as metrics.Auc."""
    _check_var(input, "input", "auc")
    _check_var(label, "label", "auc")
    if curve != "ROC":
        raise NotImplementedError("auc: only curve='ROC' (Fluid's auc kernel computes the ROC "
                                  "AUC whatever the curve), got %r" % (curve,))
    if int(num_thresholds) < 1:
        raise ValueError("auc: num_thresholds must be >= 1, got %r" % (num_thresholds,))
    if int(slide_steps) < 0:
        raise ValueError("auc: slide_steps must be >= 0, got %r" % (slide_steps,))
    if dtype_name(label.dtype) not in ("int64", "int32"):
        raise TypeError("auc: label must be int64 or int32, got %s" % dtype_name(label.dtype))
    num_thresholds, slide_steps = int(num_thresholds), int(slide_steps)
    helper = LayerHelper("auc")
    auc_out = helper.create_variable_for_type_inference("float64", stop_gradient=True)
    batch_auc_out = helper.create_variable_for_type_inference("float64", stop_gradient=True)
    # slide_steps windows, their sum and the batch count (every batch: one window).
    batch_size = ((1 + slide_steps) * (num_thresholds + 1) + 1 if slide_steps
                  else num_thresholds + 1)
    stats = [create_global_var([batch_size], 0, "int64", persistable=True,
                               name=unique_name.generate(helper.name + ".batch_stat_pos")),
             create_global_var([batch_size], 0, "int64", persistable=True,
                               name=unique_name.generate(helper.name + ".batch_stat_neg")),
             create_global_var([1, num_thresholds + 1], 0, "int64", persistable=True,
                               name=unique_name.generate(helper.name + ".stat_pos")),
             create_global_var([1, num_thresholds + 1], 0, "int64", persistable=True,
                               name=unique_name.generate(helper.name + ".stat_neg"))]
    for out, pos, neg, steps in [(batch_auc_out, stats[0], stats[1], slide_steps),
                                 (auc_out, stats[2], stats[3], 0)]:
        helper.append_op("auc", inputs={"Predict": input, "Label": label, "StatPos": pos,
                                        "StatNeg": neg},
                         outputs={"AUC": out, "StatPosOut": pos, "StatNegOut": neg},
                         attrs={"curve": curve, "num_thresholds": num_thresholds,
                                "slide_steps": steps})
    return auc_out, batch_auc_out, stats
