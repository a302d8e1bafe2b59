"""LayerHelper: creates a layer's parameters (with startup initializers) and output vars."""
import threading
import weakref

from . import unique_name
from .framework import default_main_program, default_startup_program
from .initializer import ConstantInitializer, Initializer, XavierInitializer
from .param_attr import ParamAttr, WeightNormParamAttr


# Parameter sharing across the unrolled steps of a recurrence (rnn, dynamic_decode). Fluid
# builds a while loop's body once, so the layers a cell calls (an fc in an attention) make one
# set of parameters and take one name each. Loom builds the body once per step; a later call
# of the step function replays its first call: the layers it builds get the first call's
# layer names (so the name counters move as in Fluid, and the layers built after the loop are
# named as Fluid names them) and its parameters are the first call's, in creation order.
class _Frames(threading.local):
    def __init__(self):
        self.stack = []


_FRAMES = _Frames()  # each thread's frames of the calls in progress (call_sharing_parameters)
_RECORDED = weakref.WeakKeyDictionary()  # function (or cell) -> its first call's record


def call_sharing_parameters(fn, *args, **kwargs):
    """Calls fn(*args, **kwargs). Its first call's layer names and unnamed parameters are
    recorded; a later call reuses them in order: its i-th unnamed parameter is the first
    call's i-th (more of them, or another shape, is an error). Named parameters are shared by
    their names anyway."""
    key = getattr(fn, "__self__", fn)
    try:
        record = _RECORDED.get(key)
    except TypeError:  # not weakly referable: no sharing
        return fn(*args, **kwargs)
    frame = {"replay": record is not None, "pos": 0, "hpos": 0,
             "params": record["params"] if record else [],
             "helpers": record["helpers"] if record else []}
    _FRAMES.stack.append(frame)
    try:
        out = fn(*args, **kwargs)
    finally:
        _FRAMES.stack.pop()
    if record is None:
        _RECORDED[key] = {"params": frame["params"], "helpers": frame["helpers"]}
    return out


def _layer_name(layer_type):
    if not _FRAMES.stack:
        return unique_name.generate(layer_type)
    frame = _FRAMES.stack[-1]
    helpers = frame["helpers"]
    if not frame["replay"]:
        name = unique_name.generate(layer_type)
        helpers.append((layer_type, name))
        return name
    if frame["hpos"] < len(helpers) and helpers[frame["hpos"]][0] == layer_type:
        frame["hpos"] += 1
        return helpers[frame["hpos"] - 1][1]
    frame["hpos"] = len(helpers)  # this call builds other layers: fresh names from here
    return unique_name.generate(layer_type)


def _shared_name(layer, name, shape, named):
    if not _FRAMES.stack or named:
        return name
    frame = _FRAMES.stack[-1]
    shape = [int(s) for s in shape]
    if not frame["replay"]:
        frame["params"].append((name, shape))
        return name
    if frame["pos"] >= len(frame["params"]):
        raise ValueError("%s: a later step makes more parameters than the first step of the "
                         "recurrence (%d)" % (layer, len(frame["params"])))
    first, first_shape = frame["params"][frame["pos"]]
    frame["pos"] += 1
    if first_shape != shape:
        raise ValueError("%s: parameter shape %s differs from %s of '%s', made by the first "
                         "step of the recurrence" % (layer, shape, first_shape, first))
    return first


class LayerHelper:
    def __init__(self, layer_type, name=None):
        self.layer_type = layer_type
        self.name = name or _layer_name(layer_type)

    @property
    def main_program(self):
        return default_main_program()

    @property
    def startup_program(self):
        return default_startup_program()

    @property
    def block(self):
        return self.main_program.current_block()

    def create_parameter(self, attr, shape, dtype, is_bias=False, default_initializer=None,
                         suffix=None):
        """Declares the parameter in main and startup and initializes it in startup."""
        attr = ParamAttr._to_attr(attr)
        if attr is False:
            return None
        if isinstance(attr, WeightNormParamAttr):
            return self._weight_norm_parameter(attr, shape, dtype, is_bias, default_initializer,
                                               suffix)
        if any(int(s) <= 0 for s in shape):
            raise ValueError("%s: parameter shape must be positive, got %s" %
                             (self.name, list(shape)))
        name = attr.name or "%s.%s_0" % (self.name, suffix or ("b" if is_bias else "w"))
        name = _shared_name(self.name, name, shape, bool(attr.name))
        init = attr.initializer or default_initializer or (
            ConstantInitializer(0.0) if is_bias else XavierInitializer())
        startup_block = self.startup_program.global_block()
        if not startup_block.has_var(name):
            sp = startup_block.create_parameter(name, shape, dtype, attr.trainable)
            init(sp, startup_block)
        param = self.main_program.global_block().create_parameter(
            name, shape, dtype, trainable=attr.trainable, regularizer=attr.regularizer,
            optimize_attr={"learning_rate": attr.learning_rate})
        param.do_model_average = getattr(attr, "do_model_average", True)
        return param

    def _weight_norm_parameter(self, attr, shape, dtype, is_bias, default_initializer, suffix):
        """w = g * v / ||v|| (WeightNormParamAttr): v and g are the parameters; w, computed in
        the main program, is what the layer uses."""
        shape = [int(s) for s in shape]
        dim = attr.dim
        if dim is not None:
            if not -len(shape) <= dim < len(shape):
                raise ValueError("%s: WeightNormParamAttr dim %d is out of range for a "
                                 "parameter of shape %s" % (self.name, dim, shape))
            dim %= len(shape)
        others = [d for d in range(len(shape)) if d != dim]
        base = attr.name or "%s.%s_0" % (self.name, suffix or ("b" if is_bias else "w"))

        def sub(name, initializer):
            return ParamAttr(name=name, initializer=initializer,
                             learning_rate=attr.learning_rate, regularizer=attr.regularizer,
                             trainable=attr.trainable, do_model_average=attr.do_model_average)
        v = self.create_parameter(sub(base + "_v", attr.initializer), shape, dtype, is_bias,
                                  default_initializer)

        def op(block, type, inputs, attrs=None, out=None):
            out = out or block.create_var(name=unique_name.generate(self.name + ".wn"),
                                          dtype=dtype)
            block.append_op(type, inputs=inputs, outputs={"Out": out}, attrs=attrs or {})
            return out

        def norm(block, x):  # ||x|| over `others`, shaped [g's length]
            sq = op(block, "square", {"X": x})
            total = op(block, "reduce_sum", {"X": sq},
                       {"dim": others or [0], "keep_dim": False, "reduce_all": not others})
            return op(block, "reshape", {"X": op(block, "sqrt", {"X": total})}, {"shape": [-1]})
        g_shape = [shape[dim]] if dim is not None else [1]
        startup = self.startup_program
        if not startup.global_block().has_var(base + "_g"):
            class _NormOfV(Initializer):
                """g starts at ||v||: ops of the startup program, after v's initializer."""

                def __call__(self, var, block):
                    op(block, "assign", {"X": norm(block, block.var(v.name))}, out=var)
            init = _NormOfV()
        else:
            init = ConstantInitializer(1.0)  # already made (shared): not used
        g = self.create_parameter(sub(base + "_g", init), g_shape, dtype, is_bias)
        block = self.block
        scale = op(block, "elementwise_div", {"X": g, "Y": norm(block, v)}, {"axis": -1})
        return op(block, "elementwise_mul", {"X": v, "Y": scale},
                  {"axis": dim if dim is not None else -1})

    def create_variable_for_type_inference(self, dtype="float32", stop_gradient=False):
        return self.block.create_var(name=unique_name.generate(self.name + ".tmp"), dtype=dtype,
                                     stop_gradient=stop_gradient)

    def append_op(self, *args, **kwargs):
        return self.block.append_op(*args, **kwargs)
