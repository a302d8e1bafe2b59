"""Gradient clipping as ops appended before the optimizer's update ops."""
from . import core, unique_name


def _is_sparse(var):
    return var.desc.type() == core.VarType.SELECTED_ROWS


class GradientClipByGlobalNorm:
    """Scales every gradient by clip_norm / max(global_norm, clip_norm), where global_norm is
    the L2 norm of all gradients together (squared_l2_norm, sum, sqrt, elementwise ops)."""

    def __init__(self, clip_norm):
        if clip_norm <= 0:
            raise ValueError("clip_norm must be > 0, got %r" % (clip_norm,))
        self.clip_norm = float(clip_norm)

    def append_ops(self, block, params_grads):
        def tmp(dtype, shape):
            return block.create_var(name=unique_name.generate("global_norm.tmp"), dtype=dtype,
                                    shape=shape)
        grads = [g for _, g in params_grads]
        if not grads:
            return params_grads
        dtype = grads[0].dtype
        squares = []
        for g in grads:
            sq = tmp(dtype, [1])
            x = g
            if _is_sparse(g):
                # A sparse gradient's norm: its rows merged (repeated ids summed), as a tensor.
                merged = block.create_var(name=unique_name.generate("global_norm.merged"),
                                          dtype=dtype, shape=g.shape,
                                          type=core.VarType.SELECTED_ROWS)
                block.append_op("merge_selected_rows", inputs={"X": g}, outputs={"Out": merged})
                x = tmp(dtype, [-1] + list(g.shape[1:]))
                block.append_op("get_tensor_from_selected_rows", inputs={"X": merged},
                                outputs={"Out": x})
            block.append_op("squared_l2_norm", inputs={"X": x}, outputs={"Out": sq})
            squares.append(sq)
        total = tmp(dtype, [1])
        block.append_op("sum", inputs={"X": squares}, outputs={"Out": total})
        norm = tmp(dtype, [1])
        block.append_op("sqrt", inputs={"X": total}, outputs={"Out": norm})
        clip = tmp(dtype, [1])
        block.append_op("fill_constant", outputs={"Out": clip},
                        attrs={"shape": [1], "value": self.clip_norm, "dtype": int(dtype)})
        bigger = tmp(dtype, [1])
        block.append_op("elementwise_max", inputs={"X": norm, "Y": clip}, outputs={"Out": bigger})
        factor = tmp(dtype, [1])
        block.append_op("elementwise_div", inputs={"X": clip, "Y": bigger}, outputs={"Out": factor})
        for g in grads:
            if _is_sparse(g):  # scales the rows, keeping the gradient sparse
                block.append_op("scale", inputs={"X": g, "ScaleTensor": factor},
                                outputs={"Out": g})
            else:
                block.append_op("elementwise_mul", inputs={"X": g, "Y": factor},
                                outputs={"Out": g})
        return params_grads


class GradientClipByValue:
    """Clips every gradient element into [min, max] (min defaults to -max)."""

    def __init__(self, max, min=None):
        max = float(max)
        min = -max if min is None else float(min)
        if not min <= max:
            raise ValueError("GradientClipByValue: min %r exceeds max %r" % (min, max))
        self.min, self.max = min, max

    def append_ops(self, block, params_grads):
        for _, g in params_grads:
            block.append_op("clip", inputs={"X": g}, outputs={"Out": g},
                            attrs={"min": self.min, "max": self.max})
        return params_grads


class GradientClipByNorm:
    """Scales each gradient on its own to an L2 norm of at most clip_norm."""

    def __init__(self, clip_norm):
        if clip_norm <= 0:
            raise ValueError("clip_norm must be > 0, got %r" % (clip_norm,))
        self.clip_norm = float(clip_norm)

    def append_ops(self, block, params_grads):
        for _, g in params_grads:
            block.append_op("clip_by_norm", inputs={"X": g}, outputs={"Out": g},
                            attrs={"max_norm": self.clip_norm})
        return params_grads


class ErrorClipByValue:
    """Fluid's clip of the gradient flowing back through a variable (set as var.error_clip):
    accepted, and not applied by Loom's backward."""

    def __init__(self, max, min=None):
        self.max = float(max)
        self.min = -self.max if min is None else float(min)


_global_clip = None


def set_gradient_clip(clip, param_list=None, program=None):
    """Every optimizer's minimize() then clips gradients with clip (Fluid 1.x API)."""
    global _global_clip
    _global_clip = clip


def _current_clip():
    return _global_clip
