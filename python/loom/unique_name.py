"""Unique names for variables and parameters: ``generate("fc")`` -> ``fc_0``, ``fc_1``, ...

The counters are the process's, except in a thread (not the main one) inside its own
``guard()``: those counters are that thread's alone (_per_thread.py)."""
import collections
import contextlib
import threading

from ._per_thread import PerThread

_counters = PerThread(collections.defaultdict(int))
_lock = threading.Lock()  # threads that share the process's counters take numbers one at a time


def generate(key):
    """Returns ``key_N`` with N counting up per key."""
    counters = _counters.get()
    with _lock:
        n = counters[key]
        counters[key] += 1
    return "%s_%d" % (key, n)


@contextlib.contextmanager
def guard():
    """Restarts the counters inside the block (and restores them after)."""
    token = _counters.set(collections.defaultdict(int))
    try:
        yield
    finally:
        _counters.restore(token)
