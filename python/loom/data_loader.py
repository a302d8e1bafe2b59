"""Fluid's DataLoader and PyReader: feeding a program from a Python generator.

    loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], capacity=8, iterable=True)
    loader.set_sample_generator(samples, batch_size=32, places=fluid.cpu_places(2))
    for data in loader():                # a list of feed dicts, one per place
        exe.run(compiled, feed=data, fetch_list=[loss])

    loader = fluid.io.DataLoader.from_generator(feed_list=[x, y], iterable=False)
    loader.set_batch_generator(batches)
    loader.start()
    try:
        while True:
            exe.run(main, fetch_list=[loss])   # no feed: the loader's next batch
    except fluid.core.EOFException:
        loader.reset()

A generator gives samples (set_sample_generator: tuples with one field per feed variable,
batched here), lists of samples (set_sample_list_generator) or whole batches
(set_batch_generator: one array per feed variable). Batches are prepared by a background
thread up to `capacity` ahead, so reading overlaps the step (use_double_buffer is accepted; the
queue is the buffer). With several places, each step takes one batch per place (a list of feed
dicts); CompiledProgram runs them as one global batch, split back over the places.
"""
import queue
import threading

import numpy as np

from . import core
from .data_feeder import DataFeeder
from .framework import Variable, default_main_program
from .reader import batch


class EOFException(Exception):
    """A non-iterable loader has no batch left (Fluid's fluid.core.EOFException)."""


core.EOFException = EOFException

_END = object()


class _Failure:
    def __init__(self, error):
        self.error = error


class GeneratorLoader:
    """DataLoader.from_generator's loader (and PyReader's)."""

    def __init__(self, feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                 return_list=False, use_multiprocess=False, drop_last=True):
        if not feed_list:
            raise ValueError("DataLoader.from_generator: feed_list (the feed variables) is "
                             "required")
        for v in feed_list:
            if not isinstance(v, Variable):
                raise TypeError("DataLoader.from_generator: feed_list entries must be "
                                "Variables, got %r" % (v,))
        if capacity is not None and int(capacity) <= 0:
            raise ValueError("DataLoader.from_generator: capacity must be > 0, got %r"
                             % (capacity,))
        self._feed_list = list(feed_list)
        self._capacity = int(capacity or 2)
        self._iterable = bool(iterable)
        self._return_list = bool(return_list)
        self._drop_last = bool(drop_last)
        self._batches = None  # a function returning an iterator over feed dicts
        self._places = None
        self._thread = None
        self._queue = None
        self._stop = None
        if not self._iterable:
            default_main_program()._loader = self

    # ---- the three kinds of generators
    def set_sample_generator(self, reader, batch_size, drop_last=True, places=None):
        """reader() yields samples: tuples with one field per feed variable."""
        if int(batch_size) <= 0:
            raise ValueError("set_sample_generator: batch_size must be > 0, got %r"
                             % (batch_size,))
        return self.set_sample_list_generator(batch(reader, int(batch_size), drop_last), places)

    def set_sample_list_generator(self, reader, places=None):
        """reader() yields lists of samples (batches, e.g. from fluid.io.batch)."""
        feeder = DataFeeder(self._feed_list)

        def batches():
            for samples in reader():
                yield feeder.feed(samples)
        return self._set(batches, places)

    def set_batch_generator(self, reader, places=None):
        """reader() yields batches: one array (or a list / tuple of them) per feed variable."""
        names = [v.name for v in self._feed_list]

        def batches():
            for i, b in enumerate(reader()):
                if isinstance(b, dict):
                    yield b
                    continue
                if not isinstance(b, (list, tuple)) or len(b) != len(names):
                    raise ValueError(
                        "set_batch_generator: batch %d has %s fields, feed_list has %d (%s)"
                        % (i, len(b) if isinstance(b, (list, tuple)) else "not a list of",
                           len(names), ", ".join(names)))
                yield {n: np.asarray(a) for n, a in zip(names, b)}
        return self._set(batches, places)

    # PyReader's spellings
    decorate_sample_generator = set_sample_generator
    decorate_sample_list_generator = set_sample_list_generator
    decorate_batch_generator = set_batch_generator

    def _set(self, batches, places):
        if places is not None and not isinstance(places, (list, tuple)):
            places = [places]
        if self._iterable and places is None:
            raise ValueError("an iterable DataLoader needs places (e.g. fluid.cpu_places())")
        self._batches = batches
        self._places = list(places) if places is not None else [None]
        return self

    # ---- the producer thread
    def _start_thread(self):
        if self._batches is None:
            raise RuntimeError("DataLoader: set a generator first (set_sample_generator, "
                               "set_sample_list_generator or set_batch_generator)")
        self._queue = queue.Queue(maxsize=self._capacity)
        self._stop = threading.Event()
        q, stop, batches = self._queue, self._stop, self._batches

        def put(item):
            while not stop.is_set():
                try:
                    q.put(item, timeout=0.1)
                    return True
                except queue.Full:
                    continue
            return False

        def produce():
            try:
                for b in batches():
                    if not put(b):
                        return
            except Exception as e:  # noqa: BLE001 - handed to the consumer
                put(_Failure(e))
                return
            put(_END)

        self._thread = threading.Thread(target=produce, name="loom-data-loader", daemon=True)
        self._thread.start()

    def _stop_thread(self):
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
        self._thread = self._queue = self._stop = None

    def _next_step(self):
        """The next step's feeds (one dict per place), or None at the end."""
        feeds = []
        while len(feeds) < len(self._places):
            item = self._queue.get()
            if item is _END:
                self._queue.put(_END)  # later calls see the end too
                break
            if isinstance(item, _Failure):
                raise item.error
            feeds.append(item)
        if not feeds or (len(feeds) < len(self._places) and self._drop_last):
            return None
        return feeds

    def _present(self, feeds):
        if not self._return_list:
            return feeds
        lists = [[f[v.name] for v in self._feed_list] for f in feeds]
        return lists[0] if len(lists) == 1 else lists

    # ---- iterable mode
    def __call__(self):
        if not self._iterable:
            raise RuntimeError("this DataLoader is not iterable (iterable=False): use "
                               "start() / reset() and run the program without a feed")
        return self.__iter__()

    def __iter__(self):
        self._stop_thread()
        self._start_thread()
        try:
            while True:
                feeds = self._next_step()
                if feeds is None:
                    return
                yield self._present(feeds)
        finally:
            self._stop_thread()

    # ---- non-iterable mode
    def start(self):
        """Starts reading; each Executor.run of the program without a feed takes the next
        batch, and raises fluid.core.EOFException after the last one."""
        if self._iterable:
            raise RuntimeError("start() is for DataLoaders made with iterable=False")
        self._stop_thread()
        self._start_thread()

    def reset(self):
        """Stops reading (after EOFException, or to start over)."""
        self._stop_thread()

    def _next_feed(self):
        """Executor.run's feed in non-iterable mode."""
        if self._thread is None:
            raise RuntimeError("the program's DataLoader (iterable=False) was not started: "
                               "call loader.start() before exe.run")
        feeds = self._next_step()
        if feeds is None:
            raise EOFException("the DataLoader has no batch left: call loader.reset()")
        return feeds[0] if len(feeds) == 1 else feeds


class DataLoader:
    @staticmethod
    def from_generator(feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                       return_list=False, use_multiprocess=False, drop_last=True):
        """A loader fed by a Python generator (see the module's docstring). use_multiprocess is
        accepted; batches are made on a thread."""
        return GeneratorLoader(feed_list, capacity, use_double_buffer, iterable, return_list,
                               use_multiprocess, drop_last)


class PyReader(GeneratorLoader):
    """Fluid's PyReader: DataLoader.from_generator with decorate_* spellings."""

    def __init__(self, feed_list=None, capacity=None, use_double_buffer=True, iterable=True,
                 return_list=False):
        super().__init__(feed_list, capacity, use_double_buffer, iterable, return_list)
