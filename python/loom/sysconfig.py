"""Custom ops: where Loom's headers and library are, and fluid.load_op_library.

A library of custom ops is C++ compiled against Loom's headers and linked with libloom (the one
shared library every op of Loom registers into). It registers its ops as Loom's own are
(LOOM_REGISTER_OP in operators/common.h: inputs, outputs, attributes, shape inference, kernels,
a grad maker); loading it makes them ops of every program this process builds:

    g++ -std=c++17 -O2 -fPIC -shared my_ops.cc -o libmy_ops.so \\
        $(python3 -c 'import loom; print(loom.sysconfig.compile_flags())') \\
        $(python3 -c 'import loom; print(loom.sysconfig.link_flags())')

    fluid.load_op_library("libmy_ops.so")     # -> ["my_scale"]
    helper = fluid.layers.LayerHelper("my_scale")
    out = helper.create_variable_for_type_inference("float32")
    helper.append_op("my_scale", inputs={"X": x}, outputs={"Out": out}, attrs={"factor": 3.0})

The headers are those of the build tree Loom was built in (libloom.so's directory).
"""
import ctypes
import glob
import os

from . import core

__all__ = ["get_include", "get_lib", "compile_flags", "link_flags", "load_op_library"]


def get_lib():
    """The directory of libloom.so, the library the core module runs on."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1] if "/" in line else ""
            if os.path.basename(path) == "libloom.so":
                return os.path.dirname(path)
    raise RuntimeError("sysconfig: libloom.so is not loaded in this process")


def get_include():
    """The include directories of Loom's headers (one per layer, and the generated ones)."""
    build = get_lib()
    roots = sorted(glob.glob(os.path.join(build, "include_roots", "*")))
    generated = [os.path.join(build, "generated", d) for d in ("config", "framework")]
    dirs = roots + [d for d in generated if os.path.isdir(d)] + [os.path.join(build, "generated")]
    if not roots:
        raise RuntimeError("sysconfig: no headers beside %s/libloom.so (Loom's headers are in "
                           "its build tree; this installation has none)" % build)
    return dirs


def compile_flags():
    """-I flags for a custom op's sources (C++17)."""
    return " ".join("-I" + d for d in get_include())


def link_flags():
    """-L, -l and rpath flags linking a custom op library with libloom."""
    lib = get_lib()
    return "-L%s -lloom -Wl,-rpath,%s" % (lib, lib)


def load_op_library(lib_filename):
    """Loads a shared library of custom ops (see the module's docstring) and returns the op
    types it registered. A missing file, a library that fails to load (an undefined symbol),
    one that registers no op (not linked with this libloom) or one that registers an op type
    that exists already is an error naming the library; nothing it registered twice replaces
    the op registered first."""
    if not isinstance(lib_filename, str) or not lib_filename:
        raise ValueError("load_op_library: a library path, got %r" % (lib_filename,))
    path = os.path.abspath(lib_filename)
    if not os.path.isfile(path):
        raise FileNotFoundError("load_op_library: no library %s" % path)
    before = set(core.registered_ops())
    core.take_op_registration_errors()
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_GLOBAL)
    except OSError as e:
        raise OSError("load_op_library: cannot load %s: %s" % (path, e)) from None
    errors = core.take_op_registration_errors()
    if errors:
        raise RuntimeError("load_op_library: %s: %s" % (path, "; ".join(errors)))
    added = sorted(set(core.registered_ops()) - before)
    if not added:
        raise RuntimeError("load_op_library: %s registered no op (is it linked with %s/"
                           "libloom.so, and did it load before?)" % (path, get_lib()))
    return added
