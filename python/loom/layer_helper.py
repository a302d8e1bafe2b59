"""LayerHelper: creates a layer's parameters (with startup initializers) and output vars."""
from . import unique_name
from .framework import default_main_program, default_startup_program
from .initializer import ConstantInitializer, XavierInitializer
from .param_attr import ParamAttr


class LayerHelper:
    def __init__(self, layer_type, name=None):
        self.layer_type = layer_type
        self.name = name or unique_name.generate(layer_type)

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
        if any(int(s) <= 0 for s in shape):
            raise ValueError("%s: parameter shape must be positive, got %s" %
                             (self.name, list(shape)))
        name = attr.name or "%s.%s_0" % (self.name, suffix or ("b" if is_bias else "w"))
        init = attr.initializer or default_initializer or (
            ConstantInitializer(0.0) if is_bias else XavierInitializer())
        startup_block = self.startup_program.global_block()
        if not startup_block.has_var(name):
            sp = startup_block.create_parameter(name, shape, dtype, attr.trainable)
            init(sp, startup_block)
        return self.main_program.global_block().create_parameter(
            name, shape, dtype, trainable=attr.trainable, regularizer=attr.regularizer,
            optimize_attr={"learning_rate": attr.learning_rate})

    def create_variable_for_type_inference(self, dtype="float32", stop_gradient=False):
        return self.block.create_var(name=unique_name.generate(self.name + ".tmp"), dtype=dtype,
                                     stop_gradient=stop_gradient)

    def append_op(self, *args, **kwargs):
        return self.block.append_op(*args, **kwargs)
