"""Feed variables: ``layers.data`` and ``fluid.data``; ``double_buffer``; Fluid 1.x's
non-iterable readers ``py_reader`` / ``create_py_reader_by_data`` and ``read_file``."""
from .. import unique_name
from ..framework import Variable, default_main_program

__all__ = ["data", "double_buffer", "py_reader", "create_py_reader_by_data", "read_file", "load"]


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


def _reader_class():
    from ..data_loader import PyReader

    class LayerPyReader(PyReader):
        """The reader py_reader returns: start() / reset() around a loop of exe.run without a
        feed (ended by fluid.core.EOFException), fed by one of the decorate_* generators."""

        def decorate_paddle_reader(self, reader, places=None):
            """reader() yields lists of samples (paddle.batch's output)."""
            return self.set_sample_list_generator(reader, places)

        def decorate_tensor_provider(self, reader, places=None):
            """reader() yields batches: one array per variable of the reader."""
            return self.set_batch_generator(reader, places)

    return LayerPyReader


def _new_py_reader(feed_list, capacity, use_double_buffer, what):
    if not isinstance(capacity, int) or capacity <= 0:
        raise ValueError("%s: capacity must be a positive int, got %r" % (what, capacity))
    reader = _reader_class()(feed_list=feed_list, capacity=capacity,
                             use_double_buffer=use_double_buffer, iterable=False)
    reader._read_vars = list(feed_list)
    return reader


def py_reader(capacity, shapes, dtypes, lod_levels=None, name=None, use_double_buffer=True):
    """Fluid 1.x's reader layer: one feed variable per (shape, dtype, lod_level), shapes with
    the batch dim (-1). read_file(reader) gives the variables; the program then runs without a
    feed between reader.start() and the EOFException, taking the reader's batches:

        reader = fluid.layers.py_reader(capacity=16, shapes=[[-1, 784], [-1, 1]],
                                        dtypes=["float32", "int64"])
        img, label = fluid.layers.read_file(reader)
        reader.decorate_paddle_reader(paddle.batch(samples, 32))
        reader.start()
        try:
            while True:
                exe.run(main, fetch_list=[loss])
        except fluid.core.EOFException:
            reader.reset()
    """
    if not isinstance(shapes, (list, tuple)) or not shapes:
        raise ValueError("py_reader: shapes must be a non-empty list of shapes, got %r"
                         % (shapes,))
    if not isinstance(dtypes, (list, tuple)) or len(dtypes) != len(shapes):
        raise ValueError("py_reader: %d dtypes for %d shapes" % (
            len(dtypes) if isinstance(dtypes, (list, tuple)) else -1, len(shapes)))
    lod_levels = [0] * len(shapes) if lod_levels is None else list(lod_levels)
    if len(lod_levels) != len(shapes):
        raise ValueError("py_reader: %d lod_levels for %d shapes" % (len(lod_levels),
                                                                       len(shapes)))
    prefix = name or unique_name.generate("py_reader")
    block = default_main_program().global_block()
    feed_list = []
    for i, (shape, dtype, lod) in enumerate(zip(shapes, dtypes, lod_levels)):
        if not isinstance(shape, (list, tuple)) or not shape:
            raise ValueError("py_reader: shapes[%d] must be a non-empty list, got %r"
                             % (i, shape))
        dims = [-1 if d is None else int(d) for d in shape]
        if any(d < -1 for d in dims):
            raise ValueError("py_reader: shapes[%d] = %r has a dim below -1" % (i, shape))
        feed_list.append(block.create_var(name="%s_slot_%d" % (prefix, i), shape=dims,
                                          dtype=dtype, stop_gradient=True, lod_level=int(lod)))
    return _new_py_reader(feed_list, capacity, use_double_buffer, "py_reader")


def create_py_reader_by_data(capacity, feed_list, name=None, use_double_buffer=True):
    """py_reader over existing feed variables (from layers.data): read_file(reader) gives
    them back."""
    if not isinstance(feed_list, (list, tuple)) or not feed_list:
        raise ValueError("create_py_reader_by_data: feed_list must be a non-empty list of "
                         "Variables, got %r" % (feed_list,))
    for i, v in enumerate(feed_list):
        if not isinstance(v, Variable):
            raise TypeError("create_py_reader_by_data: feed_list[%d] is not a Variable (%r)"
                            % (i, v))
    return _new_py_reader(list(feed_list), capacity, use_double_buffer,
                          "create_py_reader_by_data")


def read_file(reader):
    """The variables of a py_reader: one Variable, or a list of them."""
    vs = getattr(reader, "_read_vars", None)
    if vs is None:
        raise TypeError("read_file: expected a reader from layers.py_reader or "
                        "create_py_reader_by_data, got %r" % (reader,))
    return vs[0] if len(vs) == 1 else list(vs)


def load(out, file_path, load_as_fp16=None):
    """Appends a load op: when the program runs, out takes the tensor stored in file_path (a
    file written by core.save_tensor / io.save_vars, or a NumPy .npy), with the file's dims
    and dtype. load_as_fp16 is not supported (Loom has no float16 CPU kernels)."""
    if not isinstance(out, Variable):
        raise TypeError("layers.load: out must be a Variable, got %r" % (out,))
    if not isinstance(file_path, str) or not file_path:
        raise ValueError("layers.load: file_path must be a non-empty string, got %r"
                         % (file_path,))
    if load_as_fp16:
        raise NotImplementedError("layers.load: load_as_fp16 is not supported (no float16 "
                                  "CPU kernels); load float32 and cast on a CUDA place")
    default_main_program().current_block().append_op(
        "load", outputs={"Out": out}, attrs={"file_path": file_path})
