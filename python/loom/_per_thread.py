"""Settings that programs are built under (the default programs, the name counters, the global
scope), made safe for threads that build side by side.

The main thread's value is the process's: a guard or switch there is seen everywhere, as in
Fluid. A guard or switch in any other thread holds for that thread alone, so two threads that
each build under their own ``program_guard`` / ``unique_name.guard`` never add layers to each
other's programs or take each other's names. A thread that switched nothing sees the
process's value.
"""
import threading

_UNSET = object()


class PerThread:
    """One such setting."""

    def __init__(self, value):
        self._process = value
        self._local = threading.local()

    def get(self):
        value = getattr(self._local, "value", _UNSET)
        return self._process if value is _UNSET else value

    def set(self, value):
        """Sets it for this thread (in the main thread: for the process); returns a token that
        restore() takes to undo exactly this set."""
        if threading.current_thread() is threading.main_thread():
            token, self._process = (True, self._process), value
        else:
            token = (False, getattr(self._local, "value", _UNSET))
            self._local.value = value
        return token

    def restore(self, token):
        process, previous = token
        if process:
            self._process = previous
        elif previous is _UNSET:
            del self._local.value
        else:
            self._local.value = previous
