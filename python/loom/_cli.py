"""The ``loom`` command that ``pip install`` puts on PATH: it runs the CLI binary installed
inside the package (``loom/bin/loom``), which finds ``libloom.so`` beside this file."""
import os
import sys


def main():
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "loom")
    if not os.access(exe, os.X_OK):
        sys.stderr.write("loom: %s is missing: this loom package holds no CLI (install it with "
                         "`pip install .` from Loom's source tree, or run build/tools/loom)\n"
                         % exe)
        return 2
    os.execv(exe, [exe] + sys.argv[1:])
    return 2  # not reached


if __name__ == "__main__":
    sys.exit(main())
