"""LoD tensors (Fluid's LoDTensor): a tensor whose rows group into variable-length sequences.

    t = fluid.create_lod_tensor(np.arange(6).reshape(6, 1), [[2, 1, 3]], fluid.CPUPlace())
    t.recursive_sequence_lengths()   # [[2, 1, 3]]
    t.lod()                          # [[0, 2, 3, 6]]  (offsets)

The representation (offsets per level, checked against the rows when fed) is described in
docs/FORMATS.md.
"""
import numpy as np

from . import core

LoDTensor = core.Tensor


def _check_lengths(lengths, rows):
    if not isinstance(lengths, (list, tuple)) or not all(isinstance(l, (list, tuple))
                                                         for l in lengths):
        raise TypeError("recursive_seq_lens must be a list of lists of lengths, got %r"
                        % (lengths,))
    for l, level in enumerate(lengths):
        if any(int(n) < 0 for n in level):
            raise ValueError("recursive_seq_lens level %d has a negative length" % l)
        want = rows if l + 1 == len(lengths) else len(lengths[l + 1])
        if sum(int(n) for n in level) != want:
            raise ValueError("recursive_seq_lens level %d sums to %d, but %s %d"
                             % (l, sum(int(n) for n in level),
                                "the data has" if l + 1 == len(lengths) else
                                "the next level has", want))


def create_lod_tensor(data, recursive_seq_lens, place):
    """A LoDTensor from data (a numpy array of all sequences' rows, a list of sequences of ids
    -- flattened into an int64 [rows, 1] column -- or a LoDTensor) and the sequence lengths per
    level."""
    if isinstance(data, core.Tensor):
        arr = np.array(data)
    elif isinstance(data, list):
        flat = [x for seq in data for x in (seq if isinstance(seq, (list, tuple, np.ndarray))
                                             else [seq])]
        arr = np.asarray(flat, dtype="int64").reshape(-1, 1)
        if not recursive_seq_lens:
            recursive_seq_lens = [[len(seq) for seq in data]]
    else:
        arr = np.asarray(data)
    if arr.ndim == 0:
        raise ValueError("create_lod_tensor: data must have at least one dim")
    _check_lengths(recursive_seq_lens, arr.shape[0])
    t = core.Tensor()
    t.set(np.ascontiguousarray(arr), place)
    t.set_recursive_sequence_lengths([[int(n) for n in level] for level in recursive_seq_lens])
    return t


def create_random_int_lodtensor(recursive_seq_lens, base_shape, place, low, high):
    """A LoDTensor of random int64 values in [low, high]: rows = the last level's total length,
    each row of base_shape."""
    rows = sum(recursive_seq_lens[-1]) if recursive_seq_lens else 0
    data = np.random.randint(low, high + 1, size=[rows] + list(base_shape)).astype("int64")
    return create_lod_tensor(data, recursive_seq_lens, place)


class LoDTensorArray(list):
    """Fluid's LoDTensorArray on the host: a list of LoDTensors (what a LOD_TENSOR_ARRAY
    variable holds in a program; see layers.create_array). ``append`` takes a LoDTensor or a
    numpy array (copied into a LoDTensor on the CPU)."""

    def __init__(self, tensors=()):
        super().__init__()
        for t in tensors:
            self.append(t)

    def append(self, tensor):
        if not isinstance(tensor, core.Tensor):
            if not isinstance(tensor, np.ndarray):
                raise TypeError("LoDTensorArray.append: expects a LoDTensor or a numpy array, "
                                "got %r" % (type(tensor).__name__,))
            tensor = create_lod_tensor(tensor, [], core.CPUPlace())
        super().append(tensor)
