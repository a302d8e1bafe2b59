"""The global scope: where an Executor (or a CompiledProgram) keeps the variables of the
programs it runs when run() is given no scope; per thread where a worker thread switched it
with scope_guard (_per_thread.py)."""
import contextlib

from . import core
from ._per_thread import PerThread

Scope = core.Scope
_global_scope = PerThread(core.Scope())


def global_scope():
    """The scope executors use when run() is given none."""
    return _global_scope.get()


@contextlib.contextmanager
def scope_guard(scope):
    """Makes scope the global scope inside the with-block (in a thread other than the main one:
    for that thread alone)."""
    token = _global_scope.set(scope)
    try:
        yield
    finally:
        _global_scope.restore(token)
