"""The folder layering the build enforces (docs/ARCHITECTURE.md, "Folders and what each may
include"; cmake/layers.cmake): for each library folder, one of its sources' compile commands is
taken from the build and used to compile a file that includes one header of every other folder.
An allowed folder must compile, any other must fail with "No such file". So the arrows cannot
drift: loosening an include path, or a folder gaining an upward dependency in CMake, fails here.

Usage: layering_check.py BUILD_DIR
"""
import os
import shlex
import subprocess
import sys
import tempfile

# One header per folder (a header that exists and compiles on its own).
PROBE = {
    "base": "base/status.h",
    "collective": "collective/types.h",
    "rpc": "rpc/client.h",
    "framework": "framework/tensor.h",
    "executor": "executor/executor.h",
    "operators": "operators/collective/comm.h",
    "kvstore": "kvstore/kvstore.h",
    "transpiler": "transpiler/pass.h",
    "runtime": "runtime/runner.h",
    "sim": "sim/simulate.h",
    "tools": "tools/flags.h",
}
# What each folder may include (besides itself): the table in docs/ARCHITECTURE.md.
ALLOWED = {
    "base": set(),
    "collective": {"base"},
    "rpc": {"base"},
    "framework": {"base", "collective"},
    "executor": {"base", "framework", "collective"},
    "operators": {"base", "framework", "collective", "rpc", "kvstore"},
    "kvstore": {"base", "framework", "collective", "rpc"},
    "transpiler": {"base", "framework", "collective"},
    "runtime": {"base", "framework", "executor", "collective"},
    "sim": {"base", "collective"},
    "tools": set(PROBE) - {"operators", "tools"},
}
# A source of each folder's library, whose compile command is the folder's.
SOURCE = {
    "base": "base/status.cc",
    "collective": "collective/types.cc",
    "rpc": "rpc/client.cc",
    "framework": "framework/tensor.cc",
    "executor": "executor/executor.cc",
    "operators": "operators/collective/comm.cc",
    "kvstore": "kvstore/kvstore.cc",
    "transpiler": "transpiler/pass.cc",
    "runtime": "runtime/runner.cc",
    "sim": "sim/simulate.cc",
    "tools": "tools/flags.cc",
}


def compile_commands(build):
    out = subprocess.run(["ninja", "-C", build, "-t", "compdb"], check=True,
                         capture_output=True, text=True).stdout
    import json
    by_file = {}
    for entry in json.loads(out):
        by_file.setdefault(os.path.realpath(entry["file"]), entry)
    return by_file


def main():
    build = os.path.abspath(sys.argv[1])
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    commands = compile_commands(build)
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        probe = os.path.join(tmp, "probe.cc")
        for folder, source in SOURCE.items():
            entry = commands.get(os.path.realpath(os.path.join(src, source)))
            if entry is None:
                failures.append("%s: no compile command in %s" % (source, build))
                continue
            args = shlex.split(entry["command"])
            # Keep the compiler and its flags; drop the output, the dependency file and the input.
            keep, skip = [], False
            for a in args:
                if skip:
                    skip = False
                    continue
                if a in ("-o", "-MF", "-MT", "-c"):
                    skip = True
                    continue
                if a in ("-MD", "-MMD") or a == entry["file"]:
                    continue
                keep.append(a)
            if os.path.basename(keep[0]) == "ccache":
                keep = keep[1:]
            for other, header in PROBE.items():
                if other == folder:
                    continue
                with open(probe, "w") as f:
                    f.write('#include "%s"\n' % header)
                r = subprocess.run(keep + ["-fsyntax-only", probe], cwd=entry["directory"],
                                   capture_output=True, text=True)
                allowed = other in ALLOWED[folder]
                if allowed and r.returncode != 0:
                    failures.append("%s may include %s, but it does not compile:\n%s" %
                                    (folder, header, r.stderr[-2000:]))
                elif not allowed and r.returncode == 0:
                    failures.append("%s must not include %s, but it compiles" % (folder, header))
                elif not allowed and "No such file" not in r.stderr:
                    failures.append("%s including %s fails for another reason:\n%s" %
                                    (folder, header, r.stderr[-2000:]))
            print("%-10s may include %s" % (folder, ", ".join(sorted(ALLOWED[folder])) or "-"))
    if failures:
        print("\n".join(failures))
        return 1
    print("layering holds for %d folders" % len(SOURCE))
    return 0


if __name__ == "__main__":
    sys.exit(main())
