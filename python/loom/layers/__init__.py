"""Layers: Fluid 1.x names and signatures, as ``fluid.layers.X``. Each builds op descs into the
default programs; shapes are inferred by the C++ shape inference as ops are added, so a bad
argument fails at the line that builds the layer, with the op and the vars named.

The layers live in modules by kind, listed here so that each imports only modules listed
before it:

    common          argument checks and the one-op layer (private helpers)
    activation      activations and other element-wise functions of one input
    tensor          constants, parameters, casts, shapes, indexing, ranges
    tensor_more     strided_slice, scatter_nd(_add), unique_with_counts, shard_index, hash, ...
    control_flow    comparisons, logical ops, cond / case / switch_case / while_loop, While,
                    Switch, increment, Print
    math            element-wise ops of two inputs, products, reductions, scale, clip
    nn              fc, embedding, convolutions, pooling, normalizations, dropout, py_func, ...
    vision          pad2d, image resizing, adaptive pooling, conv3d / pool3d, channel
                    rearrangements (space_to_depth, shuffle_channel, temporal_shift, unfold)
    loss            cross entropies and other losses
    loss_more       bpr_loss, dice_loss, npair_loss, center_loss, mean_iou, fsp_matrix, ...
    large_vocab     losses over sampled or tree-coded classes: nce, hsigmoid,
                    sampled_softmax_with_cross_entropy
    norm_more       data_norm, spectral_norm and the auc metric layer
    metric          accuracy, chunk_eval
    sequence        layers over LoD sequences, the linear-chain CRF
    sequence_more   edit_distance, row_conv, ctc_greedy_decoder, im2sequence, ...
    io              feed variables (data)
    tensor_array    tensor arrays and LoD beam search
    recurrent       dynamic_lstm / dynamic_gru, gru_unit / lstm_unit, RNNCell and rnn / birnn
    static_rnn      StaticRNN
    dynamic_rnn     DynamicRNN
    decode          Decoder, BeamSearchDecoder, dynamic_decode, gather_tree
    learning_rate_scheduler   the learning-rate schedules

Every public name of these modules is a name of ``loom.layers``; math_op_patch gives Variable
its operators (``a + b``, ``a < b``, ...) when the package is imported.
"""
# The framework names layers are written with, reachable as layers.X too.
from .. import core  # noqa: F401
from ..framework import Variable, convert_dtype, default_main_program, dtype_name  # noqa: F401
from ..layer_helper import LayerHelper  # noqa: F401
from . import (activation, control_flow, decode, dynamic_rnn, io, large_vocab,
               learning_rate_scheduler, loss, loss_more, math, math_op_patch, metric, nn,
               norm_more, recurrent, sequence, sequence_more, static_rnn, tensor, tensor_array,
               tensor_more, vision)
from .activation import *  # noqa: F401,F403
from .control_flow import *  # noqa: F401,F403
from .decode import *  # noqa: F401,F403
from .dynamic_rnn import *  # noqa: F401,F403
from .io import *  # noqa: F401,F403
from .large_vocab import *  # noqa: F401,F403
from .learning_rate_scheduler import *  # noqa: F401,F403
from .loss import *  # noqa: F401,F403
from .loss_more import *  # noqa: F401,F403
from .math import *  # noqa: F401,F403
from .metric import *  # noqa: F401,F403
from .nn import *  # noqa: F401,F403
from .norm_more import *  # noqa: F401,F403
from .recurrent import *  # noqa: F401,F403
from .sequence import *  # noqa: F401,F403
from .sequence_more import *  # noqa: F401,F403
from .static_rnn import *  # noqa: F401,F403
from .tensor import *  # noqa: F401,F403
from .tensor_array import *  # noqa: F401,F403
from .tensor_more import *  # noqa: F401,F403
from .vision import *  # noqa: F401,F403



def _gone(name, replacement):
    def gone(*args, **kwargs):
        raise NotImplementedError("layers.%s is gone since Fluid 1.0 and Loom does not have it: "
                                  "%s" % (name, replacement))
    gone.__name__ = name
    gone.__doc__ = "Removed (Fluid 1.0): raises, naming the replacement: %s" % replacement
    return gone


# Fluid 1.0-era APIs removed by design: calling them names what replaced them.
ParallelDo = _gone("ParallelDo", "compile the program with fluid.CompiledProgram(main)"
                   ".with_data_parallel(loss_name=..., places=...)")
get_places = _gone("get_places", "use fluid.cpu_places(n) or fluid.cuda_places()")

__all__ = (activation.__all__ + tensor.__all__ + control_flow.__all__ + math.__all__ +
           nn.__all__ + loss.__all__ + metric.__all__ + sequence.__all__ + io.__all__ +
           tensor_array.__all__ + recurrent.__all__ + static_rnn.__all__ + dynamic_rnn.__all__ +
           decode.__all__ + learning_rate_scheduler.__all__ + tensor_more.__all__ +
           loss_more.__all__ + sequence_more.__all__ + large_vocab.__all__ + norm_more.__all__ +
           vision.__all__)

math_op_patch.monkey_patch_variable()
