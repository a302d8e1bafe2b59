"""ParamAttr: how a layer creates its parameter (name, initializer, regularizer, ...)."""
from .initializer import Initializer


class ParamAttr:
    def __init__(self, name=None, initializer=None, learning_rate=1.0, regularizer=None,
                 trainable=True, gradient_clip=None, do_model_average=True):
        self.name = name
        self.initializer = initializer
        self.learning_rate = learning_rate
        self.regularizer = regularizer
        self.trainable = trainable
        self.gradient_clip = gradient_clip
        # ModelAverage and ExponentialMovingAverage average this parameter unless False.
        self.do_model_average = do_model_average

    @staticmethod
    def _to_attr(arg):
        """None or True -> default ParamAttr; str -> named; ParamAttr as is; False -> no
        parameter."""
        if arg is None or arg is True:
            return ParamAttr()
        if isinstance(arg, ParamAttr):
            return arg
        if isinstance(arg, str):
            return ParamAttr(name=arg)
        if arg is False:
            return False
        if isinstance(arg, Initializer):
            return ParamAttr(initializer=arg)
        raise TypeError("expected ParamAttr, str, Initializer, None, True or False, got %r"
                        % (arg,))


class WeightNormParamAttr(ParamAttr):
    """Weight normalization (Salimans & Kingma 2016, Fluid's WeightNormParamAttr): the layer's
    weight is w = g * v / ||v||, with v and g the parameters that train (named NAME_v and
    NAME_g). The norm is taken over every dim but `dim` (g has shape [shape[dim]]), or over
    the whole tensor when dim is None (g has one element). v takes the initializer; g starts
    at ||v||, so the initial weight equals v."""

    def __init__(self, dim=None, name=None, initializer=None, learning_rate=1.0,
                 regularizer=None, trainable=True, gradient_clip=None, do_model_average=False):
        super().__init__(name, initializer, learning_rate, regularizer, trainable, gradient_clip,
                         do_model_average)
        if dim is not None and not isinstance(dim, int):
            raise TypeError("WeightNormParamAttr: dim must be an int or None, got %r" % (dim,))
        self.dim = dim
