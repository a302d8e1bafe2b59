"""DataFeeder: turns a minibatch (list of sample tuples) into the executor's feed dict."""
import numpy as np

from . import core
from .framework import CPUPlace, Variable, dtype_name


class DataFeeder:
    def __init__(self, feed_list, place=None, program=None):
        self.feed_vars = []
        for v in feed_list:
            if not isinstance(v, Variable):
                raise TypeError("DataFeeder: feed_list entries must be Variables, got %r" % (v,))
            self.feed_vars.append(v)
        self.place = place

    def feed(self, iterable):
        """iterable: samples, each a tuple with one entry per feed var, in feed_list order."""
        columns = [[] for _ in self.feed_vars]
        for i, sample in enumerate(iterable):
            if len(sample) != len(self.feed_vars):
                raise ValueError("DataFeeder: sample %d has %d fields, feed_list has %d vars (%s)"
                                 % (i, len(sample), len(self.feed_vars),
                                    ", ".join(v.name for v in self.feed_vars)))
            for c, value in zip(columns, sample):
                c.append(value)
        out = {}
        for var, col in zip(self.feed_vars, columns):
            if var.lod_level > 0:
                out[var.name] = self._lod_feed(var, col)
                continue
            arr = np.asarray(col, dtype=dtype_name(var.dtype))
            shape = list(var.shape)
            tail = [s for s in shape[1:]]
            if tail and all(s > 0 for s in tail):
                try:
                    arr = arr.reshape([len(col)] + tail)
                except ValueError:
                    raise ValueError("DataFeeder: var '%s' expects samples of shape %s, got %s"
                                     % (var.name, tail, list(np.asarray(col[0]).shape)))
            out[var.name] = arr
        return out

    def _lod_feed(self, var, col):
        """Each sample's field is a sequence (of rows; of sequences for lod_level 2): the rows
        are concatenated and the lengths become the LoD."""
        lengths = [[] for _ in range(var.lod_level)]

        def walk(seq, level):
            items = list(seq) if not isinstance(seq, np.ndarray) or seq.ndim > 0 else [seq]
            lengths[level].append(len(items))
            if level + 1 == var.lod_level:
                return items
            rows = []
            for s in items:
                rows.extend(walk(s, level + 1))
            return rows
        rows = []
        for i, seq in enumerate(col):
            try:
                rows.extend(walk(seq, 0))
            except TypeError:
                raise ValueError("DataFeeder: var '%s' has lod_level %d: sample %d's field must "
                                 "be a sequence, got %r" % (var.name, var.lod_level, i, seq))
        tail = [s for s in list(var.shape)[1:]]
        arr = np.asarray(rows, dtype=dtype_name(var.dtype))
        if tail and all(s > 0 for s in tail):
            arr = arr.reshape([len(rows)] + tail)
        t = core.Tensor()
        t.set(np.ascontiguousarray(arr), self.place or CPUPlace())
        t.set_recursive_sequence_lengths(lengths)
        return t
