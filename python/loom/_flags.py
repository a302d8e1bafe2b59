"""fluid.set_flags / fluid.get_flags over Loom's settings, which are environment variables read
by the C++ core. Each flag is named as Fluid names its flags (FLAGS_<name>); docs/PYTHON.md
lists them. A flag the core reads on every use takes effect on the next use; a flag the core
reads once per process (at import or at its first use) can only be given in the environment
before the process starts: set_flags refuses to change it rather than appear to succeed."""
import os

__all__ = ["set_flags", "get_flags"]


def _positive_int(name):
    def check(value):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("set_flags: %s must be an int >= 1, got %r" % (name, value))
        return str(value)
    return check


def _choice(name, choices):
    def check(value):
        if value not in choices:
            raise ValueError("set_flags: %s must be one of %s, got %r"
                             % (name, ", ".join(repr(c) for c in choices), value))
        return value
    return check


# name -> (environment variable, default shown by get_flags, parser of get_flags' value,
#          check for set_flags' value, read on every use)
_FLAGS = {
    "FLAGS_conv_algo": ("LOOM_CONV_ALGO", "direct", str,
                        _choice("FLAGS_conv_algo", ("direct", "im2col")), True),
    "FLAGS_kvstore_bigarray_bound": ("LOOM_KVSTORE_BIGARRAY_BOUND", 1000000, int,
                                     _positive_int("FLAGS_kvstore_bigarray_bound"), True),
    "FLAGS_auto_cost_model": ("LOOM_AUTO_COST_MODEL", "sim", str, None, False),
    "FLAGS_num_threads": ("LOOM_NUM_THREADS", None, int, None, False),
    "FLAGS_cpu_cache_mb": ("LOOM_CPU_CACHE_MB", 1024, int, None, False),
    "FLAGS_host_memory_mb": ("LOOM_HOST_MEMORY_MB", None, int, None, False),
}


def _flag(name):
    if name not in _FLAGS:
        raise ValueError("unknown flag '%s'; Loom's flags are %s" % (name, ", ".join(_FLAGS)))
    return _FLAGS[name]


def get_flags(flags):
    """{name: value} of a flag name or a list of them (FLAGS_conv_algo, ...): the value in the
    environment, else the default (None where the default depends on the machine). An unknown
    flag is a ValueError naming it."""
    names = [flags] if isinstance(flags, str) else list(flags)
    out = {}
    for name in names:
        env, default, parse, _check, _live = _flag(name)
        raw = os.environ.get(env)
        out[name] = parse(raw) if raw not in (None, "") else default
    return out


def set_flags(flags):
    """Sets flags from a dict {name: value}. Every name and value is checked before any is set:
    an unknown flag, a bad value, or a flag the core reads once per process (FLAGS_num_threads,
    FLAGS_cpu_cache_mb, FLAGS_host_memory_mb, FLAGS_auto_cost_model: give those in the
    environment, e.g. LOOM_NUM_THREADS, before starting Python) is a ValueError naming it."""
    if not isinstance(flags, dict):
        raise TypeError("set_flags: expects a dict of flag name -> value, got %r" % (flags,))
    todo = []
    for name, value in flags.items():
        env, _default, _parse, check, live = _flag(name)
        if not live:
            if get_flags(name)[name] == value:
                continue
            raise ValueError("set_flags: %s is read once per process; set %s in the "
                             "environment before starting Python" % (name, env))
        todo.append((env, check(value)))
    for env, value in todo:
        os.environ[env] = value
