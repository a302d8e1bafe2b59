"""append_backward: gradient ops through the C++ AppendBackward."""
from . import core
from .framework import Variable


def append_backward(loss, parameter_list=None, no_grad_set=None, callbacks=None):
    """Appends the grad ops of loss to its program; returns [(param, grad)] Variables for the
    trainable parameters (restricted to parameter_list when given)."""
    if not isinstance(loss, Variable):
        raise TypeError("append_backward: loss must be a Variable, got %r" % (loss,))
    program = loss.block.program
    no_grad = set()
    for v in no_grad_set or []:
        no_grad.add(v.name if isinstance(v, Variable) else v)
    for p in program.global_block().all_parameters():
        if not p.trainable:
            no_grad.add(p.name)
    pairs = core.append_backward(program.desc, loss.name, no_grad)
    program._sync_with_desc()
    program._version += 1
    block = program.global_block()
    wanted = None
    if parameter_list is not None:
        wanted = {p.name if isinstance(p, Variable) else p for p in parameter_list}
    out = []
    for param, grad in pairs:
        if wanted is not None and param not in wanted:
            continue
        if not block.desc.find_var(param).is_parameter():
            continue
        out.append((block.var(param), block.var(grad)))
    return out


def gradients(targets, inputs, target_gradients=None, no_grad_set=None):
    raise NotImplementedError("loom.gradients is not supported yet; use append_backward")
