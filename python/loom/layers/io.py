"""Feed variables: ``layers.data`` and ``fluid.data``; ``double_buffer``."""
from ..framework import default_main_program

__all__ = ["data", "double_buffer"]


def data(name, shape, append_batch_size=True, dtype="float32", lod_level=0, type=None,
         stop_gradient=True):
    """Declares a feed variable; a leading -1 (batch) is added unless append_batch_size=False."""
    shape = [int(s) for s in shape]
    if append_batch_size:
        shape = [-1] + shape
    block = default_main_program().global_block()
    return block.create_var(name=name, shape=shape, dtype=dtype, stop_gradient=stop_gradient,
                            lod_level=lod_level)


def _data(name, shape, dtype="float32", lod_level=0):
    """fluid.data (Fluid 1.6+): a feed variable whose shape includes the batch dim, written None
    or -1 where it varies (nothing is prepended, unlike layers.data). Feeds are checked against
    the declared dims and dtype when the program runs."""
    if not isinstance(name, str) or not name:
        raise ValueError("fluid.data: name must be a non-empty string, got %r" % (name,))
    if not isinstance(shape, (list, tuple)):
        raise TypeError("fluid.data(%r): shape must be a list or tuple, got %r" % (name, shape))
    dims = []
    for d in shape:
        if d is None or d == -1:
            dims.append(-1)
        elif isinstance(d, (int,)) and d >= 0:
            dims.append(int(d))
        else:
            raise ValueError("fluid.data(%r): shape %r has %r; dims are None, -1 or >= 0"
                             % (name, list(shape), d))
    if not isinstance(lod_level, int) or lod_level < 0:
        raise ValueError("fluid.data(%r): lod_level must be an int >= 0, got %r"
                         % (name, lod_level))
    block = default_main_program().global_block()
    return block.create_var(name=name, shape=dims, dtype=dtype, stop_gradient=True,
                            lod_level=lod_level)


def double_buffer(reader, place=None, name=None):
    """Accepted; Loom's DataLoader already prepares batches ahead on a thread."""
    return reader
