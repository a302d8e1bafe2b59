"""Unique names for variables and parameters: ``generate("fc")`` -> ``fc_0``, ``fc_1``, ..."""
import collections
import contextlib

_counters = collections.defaultdict(int)


def generate(key):
    """Returns ``key_N`` with N counting up per key."""
    n = _counters[key]
    _counters[key] += 1
    return "%s_%d" % (key, n)


@contextlib.contextmanager
def guard():
    """Restarts the counters inside the block (and restores them after)."""
    global _counters
    saved = _counters
    _counters = collections.defaultdict(int)
    try:
        yield
    finally:
        _counters = saved
