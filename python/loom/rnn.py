"""Fluid 1.8's cell-based RNN API (fluid.layers.rnn, RNNCell, GRUCell, LSTMCell, birnn).

    cell = fluid.layers.GRUCell(hidden_size=32)
    outputs, final = fluid.layers.rnn(cell, inputs, sequence_length=lengths)

`inputs` is a padded batch [batch, time, ...] (or [time, batch, ...] with time_major). Loom
unrolls the recurrence over the static time dimension when the program is built: every step is
the cell's ops again, sharing the parameters the first step made (a user cell's fc included),
so backward needs nothing special. With
sequence_length ([batch] int64), a sequence's states stop changing past its length and its
outputs there are zeros, as Fluid's. The time dimension must be static (known when building).
"""
from . import layers, unique_name
from .layer_helper import LayerHelper, call_sharing_parameters
from .param_attr import ParamAttr

__all__ = ["RNNCell", "GRUCell", "LSTMCell", "rnn", "birnn"]


class RNNCell:
    """A cell: call(inputs, states) -> (outputs, new_states); get_initial_states builds zeros
    shaped like state_shape for a batch."""

    def call(self, inputs, states, **kwargs):
        raise NotImplementedError("%s.call" % self.__class__.__name__)

    def __call__(self, inputs, states, **kwargs):
        return self.call(inputs, states, **kwargs)

    @property
    def state_shape(self):
        raise NotImplementedError("%s.state_shape" % self.__class__.__name__)

    def get_initial_states(self, batch_ref, shape=None, dtype="float32", init_value=0.0,
                           batch_dim_idx=0):
        shapes = shape if shape is not None else self.state_shape

        def build(s):
            return layers.fill_constant_batch_size_like(
                batch_ref, [-1] + list(s), dtype, init_value, input_dim_idx=batch_dim_idx)
        if isinstance(shapes, (list, tuple)) and shapes and isinstance(shapes[0], (list, tuple)):
            return [build(s) for s in shapes]
        return build(shapes)


class _GatedCell(RNNCell):
    """Shared by GRUCell and LSTMCell: the parameters are made on the first call (their input
    width is known then) and reused by every later step."""

    def __init__(self, hidden_size, param_attr, bias_attr, dtype, name):
        self.hidden_size = int(hidden_size)
        if self.hidden_size <= 0:
            raise ValueError("%s: hidden_size must be > 0, got %r"
                             % (self.__class__.__name__, hidden_size))
        self._param_attr, self._bias_attr = param_attr, bias_attr
        self._dtype = dtype
        self._name = name or unique_name.generate(self.__class__.__name__.lower())
        self._params = None

    def _weights(self, name, shape, attr, is_bias=False):
        attr = ParamAttr._to_attr(attr)
        if attr is False:
            return None
        if not attr.name:
            attr = ParamAttr(name="%s.%s" % (self._name, name), initializer=attr.initializer,
                             learning_rate=getattr(attr, "learning_rate", 1.0),
                             regularizer=getattr(attr, "regularizer", None),
                             trainable=getattr(attr, "trainable", True))
        helper = LayerHelper(self._name)
        return helper.create_parameter(attr, shape, self._dtype, is_bias=is_bias)


class GRUCell(_GatedCell):
    """h' = (1 - u) h + u c with u, r = gate_activation([x, h] W_g + b_g) and c =
    activation([x, r h] W_c + b_c)."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, dtype="float32", name="GRUCell"):
        super().__init__(hidden_size, param_attr, bias_attr, dtype,
                         None if name == "GRUCell" else name)
        self._gate_act = gate_activation or layers.sigmoid
        self._act = activation or layers.tanh

    @property
    def state_shape(self):
        return [self.hidden_size]

    def call(self, inputs, states):
        h = states
        d = self.hidden_size
        if self._params is None:
            width = inputs.shape[-1] + d
            self._params = (self._weights("gate_w", [width, 2 * d], self._param_attr),
                            self._weights("gate_b", [2 * d], self._bias_attr, True),
                            self._weights("cand_w", [width, d], self._param_attr),
                            self._weights("cand_b", [d], self._bias_attr, True))
        gw, gb, cw, cb = self._params
        gates = layers.matmul(layers.concat([inputs, h], axis=1), gw)
        if gb is not None:
            gates = layers.elementwise_add(gates, gb)
        u, r = layers.split(self._gate_act(gates), 2, dim=1)
        cand = layers.matmul(layers.concat([inputs, layers.elementwise_mul(r, h)], axis=1), cw)
        if cb is not None:
            cand = layers.elementwise_add(cand, cb)
        c = self._act(cand)
        new_h = layers.elementwise_add(layers.elementwise_mul(u, layers.elementwise_sub(c, h)), h)
        return new_h, new_h


class LSTMCell(_GatedCell):
    """[i, j, f, o] = [x, h] W + b; c' = c sigmoid(f + forget_bias) + sigmoid(i) tanh(j);
    h' = sigmoid(o) tanh(c'); states [h, c]."""

    def __init__(self, hidden_size, param_attr=None, bias_attr=None, gate_activation=None,
                 activation=None, forget_bias=1.0, dtype="float32", name="LSTMCell"):
        super().__init__(hidden_size, param_attr, bias_attr, dtype,
                         None if name == "LSTMCell" else name)
        self._gate_act = gate_activation or layers.sigmoid
        self._act = activation or layers.tanh
        self._forget_bias = float(forget_bias)

    @property
    def state_shape(self):
        return [[self.hidden_size], [self.hidden_size]]

    def call(self, inputs, states):
        h, c = states
        d = self.hidden_size
        if self._params is None:
            width = inputs.shape[-1] + d
            self._params = (self._weights("w", [width, 4 * d], self._param_attr),
                            self._weights("b", [4 * d], self._bias_attr, True))
        w, b = self._params
        gates = layers.matmul(layers.concat([inputs, h], axis=1), w)
        if b is not None:
            gates = layers.elementwise_add(gates, b)
        i, j, f, o = layers.split(gates, 4, dim=1)
        new_c = layers.elementwise_add(
            layers.elementwise_mul(c, self._gate_act(layers.scale(f, bias=self._forget_bias))),
            layers.elementwise_mul(self._gate_act(i), self._act(j)))
        new_h = layers.elementwise_mul(self._act(new_c), self._gate_act(o))
        return new_h, [new_h, new_c]


def _flatten(states):
    return list(states) if isinstance(states, (list, tuple)) else [states]


def _pack(template, flat):
    return list(flat) if isinstance(template, (list, tuple)) else flat[0]


def rnn(cell, inputs, initial_states=None, sequence_length=None, time_major=False,
        is_reverse=False, **kwargs):
    """Runs cell over the time dimension of inputs (unrolled when built); returns (outputs
    [batch, time, ...] (or time-major), final states)."""
    t_axis = 0 if time_major else 1
    steps = inputs.shape[t_axis]
    if steps is None or steps <= 0:
        raise ValueError("rnn: the time dimension of inputs must be static, got shape %r"
                         % (list(inputs.shape),))
    b_axis = 1 if time_major else 0
    states = initial_states if initial_states is not None else \
        cell.get_initial_states(inputs, dtype=inputs.dtype, batch_dim_idx=b_axis)
    mask_src = None
    if sequence_length is not None:
        mask_src = layers.cast(sequence_length, inputs.dtype)
    outputs = [None] * steps
    order = range(steps - 1, -1, -1) if is_reverse else range(steps)
    for t in order:
        x = layers.squeeze(layers.slice(inputs, axes=[t_axis], starts=[t], ends=[t + 1]),
                           [t_axis])
        # every step shares the parameters the first step's layers made (an fc in a cell)
        out, new_states = call_sharing_parameters(cell, x, states, **kwargs)
        if mask_src is not None:
            # 1 while t < length: the state moves on and the output counts; else they stay.
            keep = layers.cast(layers.greater_than(
                mask_src, layers.fill_constant([1], inputs.dtype, float(t))), inputs.dtype)
            flat_new, flat_old = _flatten(new_states), _flatten(states)
            mixed = [layers.elementwise_add(
                layers.elementwise_mul(layers.elementwise_sub(n, o), keep, axis=0), o)
                for n, o in zip(flat_new, flat_old)]
            new_states = _pack(new_states, mixed)
            out = layers.elementwise_mul(out, keep, axis=0)
        outputs[t] = out
        states = new_states
    return layers.stack(outputs, axis=t_axis), states


def birnn(cell_fw, cell_bw, inputs, initial_states=None, sequence_length=None,
          time_major=False, **kwargs):
    """A forward and a reversed rnn; returns (outputs concatenated on the last dim,
    (forward final states, backward final states))."""
    fw_init, bw_init = initial_states if initial_states is not None else (None, None)
    out_fw, st_fw = rnn(cell_fw, inputs, fw_init, sequence_length, time_major, **kwargs)
    out_bw, st_bw = rnn(cell_bw, inputs, bw_init, sequence_length, time_major, is_reverse=True,
                        **kwargs)
    return layers.concat([out_fw, out_bw], axis=-1), (st_fw, st_bw)
