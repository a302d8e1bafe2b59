#!/usr/bin/python3
"""The compatibility table of docs/PYTHON.md: every public name of PaddlePaddle Fluid 1.8's
`fluid`, `fluid.layers`, `fluid.nets`, `fluid.io`, `fluid.optimizer`, `fluid.initializer`,
`fluid.regularizer`, `fluid.clip` and `fluid.metrics` (the lists below, written down from
Fluid 1.8's API reference; `contrib` aside), marked implemented (Loom has the name),
accepted and ignored, or missing with the reason.

    PYTHONPATH=build/python /usr/bin/python3 scripts/fluid_compat.py          # print the table
    PYTHONPATH=build/python /usr/bin/python3 scripts/fluid_compat.py --write  # into docs/PYTHON.md
    PYTHONPATH=build/python /usr/bin/python3 scripts/fluid_compat.py --check  # exit 1 if stale
"""
import os
import sys

import loom

FLUID_18 = {
    "fluid": """
        Program Block Variable Parameter program_guard name_scope default_main_program
        default_startup_program Executor global_scope scope_guard Scope ParamAttr
        WeightNormParamAttr DataFeeder CPUPlace CUDAPlace CUDAPinnedPlace cpu_places cuda_places
        cuda_pinned_places CompiledProgram ExecutionStrategy BuildStrategy ParallelExecutor
        DistributeTranspiler DistributeTranspilerConfig memory_optimize release_memory
        create_lod_tensor create_random_int_lodtensor LoDTensor LoDTensorArray Tensor data
        embedding one_hot save load load_op_library require_version is_compiled_with_cuda
        in_dygraph_mode enable_dygraph disable_dygraph enable_imperative disable_imperative dygraph
        layers nets optimizer initializer regularizer clip io metrics profiler unique_name
        transpiler backward append_backward gradients set_flags get_flags device_guard
        WeightedAverage install_check dataset DatasetFactory core""",
    "layers": """
        fc embedding dynamic_lstm dynamic_lstmp dynamic_gru gru_unit lstm_unit lstm
        linear_chain_crf crf_decoding cos_sim cross_entropy bpr_loss square_error_cost chunk_eval
        sequence_conv conv2d conv3d sequence_pool sequence_softmax softmax pool2d pool3d
        adaptive_pool2d adaptive_pool3d batch_norm instance_norm data_norm conv2d_transpose
        conv3d_transpose reduce_sum reduce_mean reduce_max reduce_min reduce_prod reduce_all
        reduce_any sequence_first_step sequence_last_step sequence_slice dropout split
        ctc_greedy_decoder edit_distance l2_normalize matmul topk warpctc sequence_reshape
        transpose im2sequence nce sampled_softmax_with_cross_entropy hsigmoid beam_search
        beam_search_decode row_conv multiplex layer_norm group_norm spectral_norm
        softmax_with_cross_entropy smooth_l1 one_hot autoincreased_step_counter reshape squeeze
        unsqueeze lod_reset lod_append lrn pad pad_constant_like label_smooth roi_pool roi_align
        dice_loss image_resize image_resize_short resize_bilinear resize_trilinear resize_nearest
        gather gather_nd scatter scatter_nd_add scatter_nd sequence_scatter random_crop mean_iou
        relu selu log crop crop_tensor rank_loss margin_rank_loss elu relu6 pow stanh
        hard_sigmoid swish prelu brelu leaky_relu soft_relu flatten sequence_mask stack pad2d
        unstack sequence_enumerate unique unique_with_counts expand expand_as sequence_concat
        scale elementwise_add elementwise_div elementwise_sub elementwise_mul elementwise_max
        elementwise_min elementwise_pow elementwise_mod elementwise_floordiv
        uniform_random_batch_size_like gaussian_random sampling_id
        gaussian_random_batch_size_like sum slice strided_slice shape rank size logical_and
        logical_or logical_xor logical_not clip clip_by_norm mean mul
        sigmoid_cross_entropy_with_logits maxout space_to_depth affine_grid affine_channel
        similarity_focus hash grid_sampler log_loss add_position_encoding
        bilinear_tensor_product merge_selected_rows get_tensor_from_selected_rows shuffle_channel
        temporal_shift py_func psroi_pool prroi_pool pixel_shuffle fsp_matrix
        continuous_value_model where sign deformable_conv unfold deformable_roi_pooling
        filter_by_instag shard_index hard_swish mse_loss uniform_random gather_tree
        create_tensor create_parameter create_global_var cast tensor_array_to_tensor concat sums
        assign fill_constant_batch_size_like fill_constant argmin argmax argsort ones zeros
        reverse has_inf has_nan isfinite range linspace zeros_like ones_like diag eye
        While Switch increment array_write create_array less_than less_equal greater_than
        greater_equal equal not_equal array_read array_length cond IfElse DynamicRNN StaticRNN
        reorder_lod_tensor_by_rank Print is_empty case switch_case while_loop
        data read_file double_buffer py_reader create_py_reader_by_data load
        exponential_decay natural_exp_decay inverse_time_decay polynomial_decay piecewise_decay
        noam_decay cosine_decay linear_lr_warmup
        sigmoid logsigmoid exp tanh atan tanh_shrink softshrink sqrt rsqrt abs ceil floor cos
        acos asin sin round reciprocal square softplus softsign gelu erf thresholded_relu
        hard_shrink cumsum
        RNNCell GRUCell LSTMCell Decoder BeamSearchDecoder rnn birnn dynamic_decode
        accuracy auc
        center_loss huber_loss kldiv_loss npair_loss teacher_student_sigmoid_loss
        prior_box density_prior_box multi_box_head bipartite_match target_assign
        detection_output ssd_loss rpn_target_assign retinanet_target_assign
        sigmoid_focal_loss anchor_generator roi_perspective_transform generate_proposal_labels
        generate_proposals generate_mask_labels iou_similarity box_coder polygon_box_transform
        yolov3_loss yolo_box box_clip multiclass_nms locality_aware_nms matrix_nms
        retinanet_detection_output distribute_fpn_proposals box_decoder_and_assign
        collect_fpn_proposals""",
    "nets": "simple_img_conv_pool sequence_conv_pool glu scaled_dot_product_attention "
            "img_conv_group",
    "io": """
        save_vars save_params save_persistables load_vars load_params load_persistables
        save_inference_model load_inference_model batch shuffle buffered cache chain compose
        firstn map_readers xmap_readers multiprocess_reader PyReader DataLoader
        get_program_parameter get_program_persistable_vars save load load_program_state
        set_program_state""",
    "optimizer": """
        SGD Momentum Adagrad Adam Adamax Dpsgd DecayedAdagrad Ftrl SGDOptimizer
        MomentumOptimizer AdagradOptimizer AdamOptimizer AdamaxOptimizer DpsgdOptimizer
        DecayedAdagradOptimizer RMSPropOptimizer FtrlOptimizer Adadelta AdadeltaOptimizer
        ModelAverage LarsMomentum LarsMomentumOptimizer LambOptimizer ExponentialMovingAverage
        PipelineOptimizer LookaheadOptimizer RecomputeOptimizer DGCMomentumOptimizer""",
    "initializer": """
        Constant Uniform Normal TruncatedNormal Xavier Bilinear MSRA ConstantInitializer
        UniformInitializer NormalInitializer TruncatedNormalInitializer XavierInitializer
        BilinearInitializer MSRAInitializer NumpyArrayInitializer""",
    "regularizer": "L1Decay L2Decay L1DecayRegularizer L2DecayRegularizer",
    "clip": "ErrorClipByValue GradientClipByValue GradientClipByNorm GradientClipByGlobalNorm "
            "set_gradient_clip",
    "metrics": "MetricBase CompositeMetric Precision Recall Accuracy ChunkEvaluator "
               "EditDistance DetectionMAP Auc",
}

# Names Loom accepts without doing what Fluid does (a documented no-op).
IGNORED = {
    "fluid.memory_optimize": "no-op: the allocator reuses freed blocks",
    "fluid.release_memory": "no-op",
    "clip.ErrorClipByValue": "accepted; backward does not clip the errors it propagates",
}

# Why a family of names is missing (the first matching set wins; the rest: "not built yet").
DETECTION = set("""prior_box density_prior_box multi_box_head bipartite_match target_assign
    detection_output ssd_loss rpn_target_assign retinanet_target_assign sigmoid_focal_loss
    anchor_generator roi_perspective_transform generate_proposal_labels generate_proposals
    generate_mask_labels iou_similarity box_coder polygon_box_transform yolov3_loss yolo_box
    box_clip multiclass_nms locality_aware_nms matrix_nms retinanet_detection_output
    distribute_fpn_proposals box_decoder_and_assign collect_fpn_proposals roi_pool roi_align
    psroi_pool prroi_pool deformable_roi_pooling DetectionMAP""".split())
REASONS = [
    (DETECTION, "object detection: outside the book's models"),
    (set("enable_dygraph enable_imperative dygraph".split()),
     "dynamic graph mode: Loom is static-graph only (in_dygraph_mode() is False)"),
    (set("CUDAPinnedPlace cuda_pinned_places".split()), "pinned host memory: not built"),
    (set(["device_guard"]), "op placement across devices in one program: not built (every op "
                            "runs on the executor's place)"),
    (set("PipelineOptimizer DGCMomentumOptimizer RecomputeOptimizer".split()),
     "meta-optimizers: not built yet (Recompute needs an executor that frees activations "
     "early)"),
]

MODULES = {"fluid": loom, "layers": loom.layers, "nets": loom.nets, "io": loom.io,
           "optimizer": loom.optimizer, "initializer": loom.initializer,
           "regularizer": loom.regularizer, "clip": loom.clip,
           "metrics": getattr(loom, "metrics", None)}

BEGIN = "<!-- fluid compatibility (scripts/fluid_compat.py) -->"
END = "<!-- end of fluid compatibility -->"
DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "docs", "PYTHON.md")


def status():
    """{module: ([implemented], [(ignored, why)], [(missing, why)])}"""
    out = {}
    for mod, names in FLUID_18.items():
        m = MODULES[mod]
        done, ignored, missing = [], [], []
        for name in sorted(set(names.split()), key=str.lower):
            key = "%s.%s" % (mod, name)
            if key in IGNORED:
                ignored.append((name, IGNORED[key]))
            elif m is not None and hasattr(m, name):
                done.append(name)
            else:
                why = next((r for group, r in REASONS if name in group), "not built yet")
                missing.append((name, why))
        out[mod] = done, ignored, missing
    return out


def table():
    lines = [BEGIN, "", "| module | names | implemented | accepted, ignored | missing |",
             "| --- | --- | --- | --- | --- |"]
    st = status()
    total = [0, 0, 0, 0]
    for mod, (done, ignored, missing) in st.items():
        n = len(done) + len(ignored) + len(missing)
        total = [total[0] + n, total[1] + len(done), total[2] + len(ignored),
                 total[3] + len(missing)]
        lines.append("| `%s` | %d | %d | %d | %d |" % (mod, n, len(done), len(ignored),
                                                      len(missing)))
    lines.append("| all | %d | %d | %d | %d |" % tuple(total))
    for mod, (done, ignored, missing) in st.items():
        lines += ["", "**`%s`** implemented: %s" % (mod, ", ".join("`%s`" % n for n in done)
                                                     or "none")]
        if ignored:
            lines.append("accepted and ignored: " + "; ".join("`%s` (%s)" % i for i in ignored))
        by_reason = {}
        for name, why in missing:
            by_reason.setdefault(why, []).append(name)
        for why, names in by_reason.items():
            lines.append("missing (%s): %s" % (why, ", ".join("`%s`" % n for n in names)))
    lines += ["", END]
    return "\n".join(lines)


def main():
    text = table()
    if len(sys.argv) > 1 and sys.argv[1] in ("--write", "--check"):
        doc = open(DOC, encoding="utf-8").read()
        if BEGIN not in doc or END not in doc:
            sys.exit("docs/PYTHON.md has no compatibility section markers")
        a, b = doc.index(BEGIN), doc.index(END) + len(END)
        new = doc[:a] + text + doc[b:]
        if sys.argv[1] == "--check":
            if new != doc:
                sys.exit("docs/PYTHON.md's compatibility table is out of date: run "
                         "scripts/fluid_compat.py --write")
            return
        tmp = DOC + ".tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(new)
        os.replace(tmp, DOC)
        return
    print(text)


if __name__ == "__main__":
    main()
