"""Normalizations with their own statistics and the AUC metric layer: data_norm,
spectral_norm and auc (Fluid 1.8's signatures and math)."""
from .. import unique_name
from ..framework import dtype_name
from ..initializer import ConstantInitializer, NormalInitializer
from ..layer_helper import LayerHelper
from ..param_attr import ParamAttr
from .activation import _act, _check_act
from .common import _check_var
from .tensor import create_global_var

__all__ = ["auc", "data_norm", "spectral_norm"]


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


def data_norm(input, act=None, epsilon=1e-05, param_attr=None, data_layout="NCHW",
              in_place=False, name=None, moving_mean_name=None, moving_variance_name=None,
              do_model_average_for_mean_and_var=True, slot_dim=-1, sync_stats=False,
              summary_decay_rate=0.9999999):
    """Normalizes input [N, C] by accumulated statistics, as Fluid's data_norm: three
    parameters [C] named <name>.batch_size, <name>.batch_sum and <name>.batch_square_sum
    (initial values 1e4, 0 and 1e4, or param_attr's dict keys batch_size, batch_sum,
    batch_square), and Y = (input - batch_sum / batch_size) * sqrt(batch_size /
    batch_square_sum). Their gradients are the batch's own statistics (N, the sums, the
    squared deviations plus N * epsilon), which the optimizer folds in. in_place is accepted
    (the result is a new variable either way)."""
    _check_var(input, "input", "data_norm")
    dtype = dtype_name(input.dtype)
    if dtype not in ("float32", "float64"):
        raise TypeError("data_norm: input must be float32 or float64, got %s" % dtype)
    if data_layout not in ("NCHW", "NHWC"):
        raise ValueError("data_norm: data_layout must be 'NCHW' or 'NHWC', got %r"
                         % (data_layout,))
    if len(input.shape) != 2:
        raise ValueError("data_norm: input must be 2-D [batch, channels], got shape %s"
                         % list(input.shape))
    if slot_dim is not None and int(slot_dim) > 0:
        raise NotImplementedError("data_norm: slot_dim > 0 (per-slot show/click handling) is "
                                  "not supported")
    if act is not None:
        _check_act(act)
    helper = LayerHelper("data_norm", name=name)
    channels = int(input.shape[1])
    defaults = {"batch_size": 1e4, "batch_sum": 0.0, "batch_square": 1e4}
    if isinstance(param_attr, dict):
        for k in defaults:
            defaults[k] = float(param_attr.get(k, defaults[k]))
    params = {}
    for slot, key, suffix in [("BatchSize", "batch_size", "batch_size"),
                              ("BatchSum", "batch_sum", "batch_sum"),
                              ("BatchSquareSum", "batch_square", "batch_square_sum")]:
        params[slot] = helper.create_parameter(
            ParamAttr(name="%s.%s" % (helper.name, suffix),
                      initializer=ConstantInitializer(defaults[key])), [channels], dtype)
    means = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    scales = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    out = helper.create_variable_for_type_inference(dtype)
    inputs = {"X": input}
    inputs.update(params)
    helper.append_op("data_norm", inputs=inputs,
                     outputs={"Y": out, "Means": means, "Scales": scales},
                     attrs={"epsilon": float(epsilon), "data_layout": data_layout,
                            "sync_stats": bool(sync_stats),
                            "summary_decay_rate": float(summary_decay_rate)})
    return _act(out, act)


def spectral_norm(weight, dim=0, power_iters=1, eps=1e-12, name=None):
    """weight divided by its largest singular value, as Fluid's spectral_norm: weight (rank 2
    to 5) is seen as a matrix whose rows are its dim `dim` (0 or 1); power_iters rounds of
    power iteration from the vectors u [h] and v [w] (parameters drawn from N(0, 1), never
    updated) estimate sigma = u^T W v. The gradient holds u and v fixed."""
    _check_var(weight, "weight", "spectral_norm")
    dtype = dtype_name(weight.dtype)
    if dtype not in ("float32", "float64"):
        raise TypeError("spectral_norm: weight must be float32 or float64, got %s" % dtype)
    shape = [int(s) for s in weight.shape]
    if not 2 <= len(shape) <= 5:
        raise ValueError("spectral_norm: weight must have rank 2 to 5, got shape %s" % shape)
    if dim not in (0, 1):
        raise ValueError("spectral_norm: dim must be 0 or 1, got %r" % (dim,))
    if int(power_iters) < 0:
        raise ValueError("spectral_norm: power_iters must be >= 0, got %r" % (power_iters,))
    if any(s <= 0 for s in shape):
        raise ValueError("spectral_norm: weight's dims must be known, got shape %s" % shape)
    helper = LayerHelper("spectral_norm", name=name)
    h = shape[dim]
    w = 1
    for s in shape:
        w *= s
    w //= h
    u = helper.create_parameter(ParamAttr(trainable=False), [h], dtype,
                                default_initializer=NormalInitializer(0.0, 1.0), suffix="u")
    v = helper.create_parameter(ParamAttr(trainable=False), [w], dtype,
                                default_initializer=NormalInitializer(0.0, 1.0), suffix="v")
    u.stop_gradient = True
    v.stop_gradient = True
    out = helper.create_variable_for_type_inference(dtype)
    helper.append_op("spectral_norm", inputs={"Weight": weight, "U": u, "V": v},
                     outputs={"Out": out},
                     attrs={"dim": int(dim), "power_iters": int(power_iters),
                            "eps": float(eps)})
    return out
