"""fluid.dataset: Fluid's file datasets for exe.train_from_dataset, the way industrial CTR
jobs feed a program.

    dataset = fluid.DatasetFactory().create_dataset("InMemoryDataset")   # or "QueueDataset"
    dataset.set_use_var([ids, label])         # the slots, in file order
    dataset.set_batch_size(32)
    dataset.set_thread(2)                     # files parsed by 2 threads
    dataset.set_pipe_command("cat")           # each file goes through this shell command
    dataset.set_filelist(["part-0", "part-1"])
    dataset.load_into_memory()                # InMemoryDataset: read once ...
    dataset.local_shuffle()                   # ... and shuffle
    exe.train_from_dataset(main, dataset, fetch_list=[loss], print_period=100)

Files are in Fluid's MultiSlot text format: one sample per line; for each slot of
set_use_var, in order, a count n then n values (ints for int64 slots, floats for float
slots). A slot with lod_level 1 takes any count (a sequence, e.g. the feature ids of a
sparse slot); a slot with lod_level 0 takes exactly the number of values of its shape. A
malformed line is an error naming the file and line. The pipe command runs as
`sh -c CMD < file` (Fluid's `cat file | CMD`); a command that fails is an error with its
exit status and stderr.

QueueDataset streams the files in list order on every pass; InMemoryDataset reads them into
memory once (load_into_memory), local_shuffle / global_shuffle shuffle the samples (with one
process they are the same, seeded by set_shuffle_seed), and every pass goes over memory.
"""
import random
import subprocess
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .data_feeder import DataFeeder
from .framework import Variable, dtype_name

__all__ = ["DatasetFactory", "DatasetBase", "QueueDataset", "InMemoryDataset"]


class DatasetFactory:
    """Makes datasets by Fluid's class names."""

    def create_dataset(self, datafeed_class="QueueDataset"):
        kinds = {"QueueDataset": QueueDataset, "InMemoryDataset": InMemoryDataset,
                 "FileInstantDataset": QueueDataset}
        if datafeed_class not in kinds:
            raise ValueError("DatasetFactory.create_dataset: unknown dataset %r (have %s)"
                             % (datafeed_class, ", ".join(sorted(kinds))))
        return kinds[datafeed_class]()


class DatasetBase:
    def __init__(self):
        self._pipe_command = "cat"
        self._batch_size = 1
        self._thread = 1
        self._filelist = []
        self._use_vars = []

    def set_pipe_command(self, pipe_command):
        """The shell command each file is piped through (default `cat`)."""
        if not isinstance(pipe_command, str) or not pipe_command.strip():
            raise ValueError("set_pipe_command: a non-empty shell command, got %r"
                             % (pipe_command,))
        self._pipe_command = pipe_command

    def set_batch_size(self, batch_size):
        if not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError("set_batch_size: a positive int, got %r" % (batch_size,))
        self._batch_size = batch_size

    def set_thread(self, thread_num):
        """Threads that parse files (train_from_dataset runs the steps in order)."""
        if not isinstance(thread_num, int) or thread_num <= 0:
            raise ValueError("set_thread: a positive int, got %r" % (thread_num,))
        self._thread = thread_num

    def set_filelist(self, filelist):
        if not isinstance(filelist, (list, tuple)) or \
                not all(isinstance(f, str) for f in filelist):
            raise TypeError("set_filelist: a list of file paths, got %r" % (filelist,))
        self._filelist = list(filelist)

    def set_use_var(self, var_list):
        """The slots of each line, in order: feed Variables (layers.data)."""
        if not isinstance(var_list, (list, tuple)) or not var_list:
            raise ValueError("set_use_var: a non-empty list of Variables, got %r" % (var_list,))
        for i, v in enumerate(var_list):
            if not isinstance(v, Variable):
                raise TypeError("set_use_var: var_list[%d] is not a Variable (%r)" % (i, v))
            if dtype_name(v.dtype) not in ("int64", "float32", "float64"):
                raise TypeError("set_use_var: slot '%s' is %s; MultiSlot slots are int64 or "
                                "float" % (v.name, dtype_name(v.dtype)))
        self._use_vars = list(var_list)

    def set_hdfs_config(self, fs_name, fs_ugi):
        raise NotImplementedError("set_hdfs_config: Loom datasets read local files (give "
                                  "local paths to set_filelist)")

    def desc(self):
        """A text description of the data feed (Fluid prints its DataFeedDesc)."""
        slots = "\n".join("  slot { name: %r type: %r is_dense: %s }"
                          % (v.name, "uint64" if dtype_name(v.dtype) == "int64" else "float",
                             "false" if v.lod_level else "true") for v in self._use_vars)
        return ("name: \"MultiSlotDataFeed\"\nbatch_size: %d\npipe_command: %r\n"
                "multi_slot_desc {\n%s\n}" % (self._batch_size, self._pipe_command, slots))

    # ---- reading
    def _check_ready(self, what):
        if not self._use_vars:
            raise RuntimeError("%s: call set_use_var first" % what)
        if not self._filelist:
            raise RuntimeError("%s: call set_filelist first (the list is empty)" % what)

    def _parse_file(self, path):
        try:
            with open(path, "rb") as f:
                proc = subprocess.run(["sh", "-c", self._pipe_command], stdin=f,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      timeout=3600)
        except OSError as e:
            raise IOError("dataset: cannot read %s: %s" % (path, e)) from None
        if proc.returncode != 0:
            raise RuntimeError("dataset: pipe command %r exited with %d on %s: %s"
                               % (self._pipe_command, proc.returncode, path,
                                  proc.stderr.decode(errors="replace").strip()[-500:]))
        samples = []
        for lineno, line in enumerate(proc.stdout.decode().splitlines(), 1):
            if line.strip():
                samples.append(self._parse_line(line, path, lineno))
        return samples

    def _parse_line(self, line, path, lineno):
        tok = line.split()
        pos = 0
        sample = []
        for v in self._use_vars:
            where = "dataset: %s line %d, slot '%s'" % (path, lineno, v.name)
            if pos >= len(tok):
                raise ValueError("%s: the line ends before this slot" % where)
            try:
                n = int(tok[pos])
            except ValueError:
                raise ValueError("%s: count %r is not an int" % (where, tok[pos])) from None
            if n < 0 or pos + 1 + n > len(tok):
                raise ValueError("%s: count %d, but %d values follow" % (where, n,
                                                                        len(tok) - pos - 1))
            raw = tok[pos + 1:pos + 1 + n]
            pos += 1 + n
            is_int = dtype_name(v.dtype) == "int64"
            try:
                vals = [int(t) for t in raw] if is_int else [float(t) for t in raw]
            except ValueError:
                raise ValueError("%s: values %s are not %s" % (
                    where, " ".join(raw[:5]), "ints" if is_int else "floats")) from None
            if v.lod_level:
                if n == 0:
                    raise ValueError("%s: an empty sequence (count 0)" % where)
                sample.append(np.asarray(vals, dtype=dtype_name(v.dtype)).reshape(n, 1))
            else:
                want = int(np.prod([d for d in v.shape[1:]])) if len(v.shape) > 1 else 1
                if n != want:
                    raise ValueError("%s: %d values for a dense slot of %d" % (where, n, want))
                sample.append(vals if want > 1 else vals[0])
        if pos != len(tok):
            raise ValueError("dataset: %s line %d: %d values after the last slot"
                             % (path, lineno, len(tok) - pos))
        return tuple(sample)

    def _read_files(self):
        """The samples of every file, files in list order (parsed by set_thread threads)."""
        with ThreadPoolExecutor(max_workers=self._thread) as pool:
            for samples in pool.map(self._parse_file, self._filelist):
                yield from samples

    def _batches(self, samples):
        feeder = DataFeeder(self._use_vars)
        batch = []
        for s in samples:
            batch.append(s)
            if len(batch) == self._batch_size:
                yield feeder.feed(batch)
                batch = []
        if batch:
            yield feeder.feed(batch)

    def _feeds(self):
        raise NotImplementedError


class QueueDataset(DatasetBase):
    """Streams the files in list order on every pass."""

    def _feeds(self):
        self._check_ready("QueueDataset")
        return self._batches(self._read_files())

    def local_shuffle(self):
        raise NotImplementedError("QueueDataset streams its files: use InMemoryDataset to "
                                  "shuffle")

    global_shuffle = local_shuffle


class InMemoryDataset(DatasetBase):
    """Reads the files into memory once; shuffles in memory; every pass reads memory."""

    def __init__(self):
        super().__init__()
        self._samples = None
        self._seed = 0
        self._preload = None

    def set_shuffle_seed(self, seed):
        self._seed = int(seed)

    def load_into_memory(self):
        self._check_ready("load_into_memory")
        self._samples = list(self._read_files())

    def preload_into_memory(self, thread_num=None):
        """load_into_memory on a background thread; wait_preload_done() joins it."""
        if thread_num is not None:
            self.set_thread(thread_num)
        errors = []

        def run():
            try:
                self.load_into_memory()
            except BaseException as e:  # re-raised by wait_preload_done
                errors.append(e)
        self._preload = (threading.Thread(target=run, daemon=True), errors)
        self._preload[0].start()

    def wait_preload_done(self):
        if self._preload is None:
            raise RuntimeError("wait_preload_done: preload_into_memory was not called")
        t, errors = self._preload
        t.join()
        self._preload = None
        if errors:
            raise errors[0]

    def _loaded(self, what):
        if self._samples is None:
            raise RuntimeError("%s: call load_into_memory first" % what)
        return self._samples

    def local_shuffle(self):
        random.Random(self._seed).shuffle(self._loaded("local_shuffle"))
        self._seed += 1

    def global_shuffle(self, fleet=None, thread_num=12):
        """With one process the same as local_shuffle (fleet is accepted)."""
        self.local_shuffle()

    def release_memory(self):
        self._samples = None

    def get_memory_data_size(self, fleet=None):
        return len(self._loaded("get_memory_data_size"))

    def get_shuffle_data_size(self, fleet=None):
        return len(self._loaded("get_shuffle_data_size"))

    def _feeds(self):
        return self._batches(self._loaded("InMemoryDataset"))
