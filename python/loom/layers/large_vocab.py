"""Losses over large vocabularies that touch only some classes per row: nce, hsigmoid and
sampled_softmax_with_cross_entropy (Fluid 1.8's signatures and math)."""
import numpy as np

from ..framework import dtype_name
from ..layer_helper import LayerHelper
from .common import _check_var
from .loss import softmax_with_cross_entropy
from .math import reduce_sum
from .tensor import assign, cast, one_hot, reshape

__all__ = ["nce", "hsigmoid", "sampled_softmax_with_cross_entropy"]

_SAMPLERS = {"uniform": 0, "log_uniform": 1, "custom_dist": 2}


def _dtype(x):
    return dtype_name(x.dtype)


def nce(input, label, num_total_classes, sample_weight=None, param_attr=None, bias_attr=None,
        num_neg_samples=None, name=None, sampler="uniform", custom_dist=None, seed=0,
        is_sparse=False):
    """Noise-contrastive estimation loss [N, 1] of input [N, D] against label [N, num_true]
    (int64): per row, a logistic loss of the true classes against num_neg_samples (default
    10) classes drawn by sampler ('uniform', 'log_uniform' or 'custom_dist' with the
    probabilities custom_dist), each logit corrected by log(num_neg_samples * Q(class)); the
    row's sum, times sample_weight, divided by num_neg_samples + 1. A non-zero seed draws the
    same classes on every run. is_sparse makes the weight and bias gradients SelectedRows of
    the sampled rows."""
    _check_var(input, "input", "nce")
    _check_var(label, "label", "nce")
    if _dtype(input) not in ("float32", "float64"):
        raise TypeError("nce: input must be float32 or float64, got %s" % _dtype(input))
    if _dtype(label) != "int64":
        raise TypeError("nce: label must be int64, got %s" % _dtype(label))
    if len(input.shape) != 2:
        raise ValueError("nce: input must be 2-D [batch, dim], got shape %s" % list(input.shape))
    if len(label.shape) != 2:
        raise ValueError("nce: label must be 2-D [batch, num_true], got shape %s"
                         % list(label.shape))
    if not isinstance(num_total_classes, (int, np.integer)) or num_total_classes < 1:
        raise ValueError("nce: num_total_classes must be a positive int, got %r"
                         % (num_total_classes,))
    num_neg_samples = 10 if num_neg_samples is None else int(num_neg_samples)
    if num_neg_samples < 1:
        raise ValueError("nce: num_neg_samples must be >= 1, got %d" % num_neg_samples)
    if sampler not in _SAMPLERS:
        raise ValueError("nce: sampler must be 'uniform', 'log_uniform' or 'custom_dist', got %r"
                         % (sampler,))
    if sample_weight is not None:
        _check_var(sample_weight, "sample_weight", "nce")
    helper = LayerHelper("nce", name=name)
    dim = int(input.shape[1])
    dtype = _dtype(input)
    w = helper.create_parameter(param_attr, [int(num_total_classes), dim], dtype)
    inputs = {"Input": input, "Label": label, "Weight": w}
    b = helper.create_parameter(bias_attr, [int(num_total_classes), 1], dtype, is_bias=True)
    if b is not None:
        inputs["Bias"] = b
    if sample_weight is not None:
        inputs["SampleWeight"] = sample_weight
    if sampler == "custom_dist":
        if custom_dist is None:
            raise ValueError("nce: sampler='custom_dist' needs custom_dist (the probabilities)")
        probs = np.asarray(custom_dist, dtype="float64").ravel()
        if len(probs) != num_total_classes:
            raise ValueError("nce: custom_dist holds %d probabilities, num_total_classes is %d"
                             % (len(probs), num_total_classes))
        if (probs < 0).any() or probs.sum() <= 0:
            raise ValueError("nce: custom_dist must be non-negative with a positive sum")
        inputs["CustomDistProbs"] = assign(probs.astype("float32"))
    cost = helper.create_variable_for_type_inference(dtype)
    sample_logits = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    sample_labels = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("nce", inputs=inputs,
                     outputs={"Cost": cost, "SampleLogits": sample_logits,
                              "SampleLabels": sample_labels},
                     attrs={"num_total_classes": int(num_total_classes),
                            "num_neg_samples": num_neg_samples, "seed": int(seed),
                            "sampler": _SAMPLERS[sampler], "is_sparse": bool(is_sparse),
                            "remote_prefetch": bool(is_sparse)})
    return cost / float(num_neg_samples + 1)


def hsigmoid(input, label, num_classes, param_attr=None, bias_attr=None, name=None,
             path_table=None, path_code=None, is_custom=False, is_sparse=False):
    """Hierarchical sigmoid loss [N, 1] of input [N, D] for label [N, 1] (int64): the sum of
    logistic losses at the inner nodes of the label's path in a binary tree. The default tree
    is the complete binary tree of num_classes leaves (num_classes - 1 inner nodes: weights
    [num_classes - 1, D]); is_custom=True takes each row's path from path_table (inner-node
    ids, ended by -1) and path_code (the bits), with weights [num_classes, D]. is_sparse
    (custom trees only, as in Fluid) makes the weight gradient a SelectedRows."""
    _check_var(input, "input", "hsigmoid")
    _check_var(label, "label", "hsigmoid")
    if _dtype(input) not in ("float32", "float64"):
        raise TypeError("hsigmoid: input must be float32 or float64, got %s" % _dtype(input))
    if _dtype(label) != "int64":
        raise TypeError("hsigmoid: label must be int64, got %s" % _dtype(label))
    if len(input.shape) != 2:
        raise ValueError("hsigmoid: input must be 2-D [batch, dim], got shape %s"
                         % list(input.shape))
    if not is_custom:
        if num_classes is None or int(num_classes) < 2:
            raise ValueError("hsigmoid: num_classes must be >= 2 with the default tree, got %r"
                             % (num_classes,))
        if path_table is not None or path_code is not None:
            raise ValueError("hsigmoid: path_table and path_code are for a custom tree "
                             "(is_custom=True); the default tree takes only num_classes")
        is_sparse = False  # Fluid: sparse updates only with a custom tree
    else:
        if path_code is None:
            raise ValueError("hsigmoid: path_code must be given with a custom tree")
        if path_table is None:
            raise ValueError("hsigmoid: path_table must be given with a custom tree")
        if num_classes is None or int(num_classes) < 1:
            raise ValueError("hsigmoid: num_classes must be given with a custom tree")
        _check_var(path_table, "path_table", "hsigmoid")
        _check_var(path_code, "path_code", "hsigmoid")
    helper = LayerHelper("hierarchical_sigmoid", name=name)
    dtype = _dtype(input)
    dim = int(input.shape[1])
    nodes = int(num_classes) if is_custom else int(num_classes) - 1
    w = helper.create_parameter(param_attr, [nodes, dim], dtype)
    inputs = {"X": input, "W": w, "Label": label}
    if is_custom:
        inputs["PathTable"] = path_table
        inputs["PathCode"] = path_code
    b = helper.create_parameter(bias_attr, [nodes, 1], dtype, is_bias=True)
    if b is not None:
        inputs["Bias"] = b
    out = helper.create_variable_for_type_inference(dtype)
    pre_out = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    helper.append_op("hierarchical_sigmoid", inputs=inputs,
                     outputs={"Out": out, "PreOut": pre_out},
                     attrs={"num_classes": int(num_classes), "is_sparse": bool(is_sparse),
                            "remote_prefetch": bool(is_sparse)})
    return out


def sampled_softmax_with_cross_entropy(logits, label, num_samples, num_true=1,
                                       remove_accidental_hits=True, use_customized_samples=False,
                                       customized_samples=None, customized_probabilities=None,
                                       seed=0):
    """Sampled softmax loss [N, 1] of logits [N, K] for label [N, num_true] (int64): the
    softmax cross entropy over each row's true classes and num_samples classes drawn once
    per batch (log-uniform, distinct) or given as customized_samples [N, num_true +
    num_samples] with customized_probabilities, each logit less log of its probability of
    being drawn. remove_accidental_hits lowers a sampled class that is one of the row's
    labels by 1e20. The loss is divided by num_true, as in Fluid."""
    _check_var(logits, "logits", "sampled_softmax_with_cross_entropy")
    _check_var(label, "label", "sampled_softmax_with_cross_entropy")
    if _dtype(logits) not in ("float32", "float64"):
        raise TypeError("sampled_softmax_with_cross_entropy: logits must be float32 or float64, "
                        "got %s" % _dtype(logits))
    if _dtype(label) != "int64":
        raise TypeError("sampled_softmax_with_cross_entropy: label must be int64, got %s"
                        % _dtype(label))
    if len(logits.shape) != 2 or len(label.shape) != 2:
        raise ValueError("sampled_softmax_with_cross_entropy: logits must be [N, K] and label "
                         "[N, num_true], got shapes %s and %s"
                         % (list(logits.shape), list(label.shape)))
    num_samples, num_true = int(num_samples), int(num_true)
    if num_samples < 1:
        raise ValueError("sampled_softmax_with_cross_entropy: num_samples must be >= 1, got %d"
                         % num_samples)
    if num_true < 1 or (label.shape[1] >= 0 and label.shape[1] != num_true):
        raise ValueError("sampled_softmax_with_cross_entropy: num_true (%d) must be label's "
                         "second dim (%d)" % (num_true, label.shape[1]))
    k = int(logits.shape[1])
    if not use_customized_samples and k > 0 and num_samples > k - 1:
        raise ValueError("sampled_softmax_with_cross_entropy: num_samples (%d) must be at most "
                         "the number of classes less one (%d)" % (num_samples, k - 1))
    helper = LayerHelper("sample_logits")
    dtype = _dtype(logits)
    inputs = {"Logits": logits, "Labels": label}
    if use_customized_samples:
        if customized_samples is None or customized_probabilities is None:
            raise ValueError("sampled_softmax_with_cross_entropy: use_customized_samples needs "
                             "customized_samples and customized_probabilities")
        _check_var(customized_samples, "customized_samples",
                   "sampled_softmax_with_cross_entropy")
        _check_var(customized_probabilities, "customized_probabilities",
                   "sampled_softmax_with_cross_entropy")
        inputs["CustomizedSamples"] = customized_samples
        inputs["CustomizedProbabilities"] = customized_probabilities
    samples = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    probabilities = helper.create_variable_for_type_inference(dtype, stop_gradient=True)
    sampled_logits = helper.create_variable_for_type_inference(dtype)
    sampled_label = helper.create_variable_for_type_inference("int64", stop_gradient=True)
    helper.append_op("sample_logits", inputs=inputs,
                     outputs={"Samples": samples, "Probabilities": probabilities,
                              "SampledLogits": sampled_logits, "SampledLabels": sampled_label},
                     attrs={"use_customized_samples": bool(use_customized_samples),
                            "uniq": True, "remove_accidental_hits": bool(remove_accidental_hits),
                            "num_samples": num_samples, "seed": int(seed)})
    depth = num_true + num_samples
    if num_true == 1:
        soft_label = one_hot(sampled_label, depth)
    else:  # the true columns 0 .. num_true - 1 each get a 1
        rows = one_hot(reshape(sampled_label, [-1, 1]), depth)
        soft_label = reduce_sum(reshape(rows, [-1, num_true, depth]), dim=1)
    if dtype != "float32":
        soft_label = cast(soft_label, dtype)
    soft_label.stop_gradient = True
    loss = softmax_with_cross_entropy(sampled_logits, soft_label, soft_label=True,
                                      numeric_stable_mode=False)
    return loss / float(num_true)
