"""PEP 517 build backend of Loom: ``pip install .`` and ``pip wheel .`` build the C++ core with
the project's own CMake build (the same one ``scripts/build.sh`` runs) and pack the ``loom``
package with ``libloom.so`` beside the module and the ``loom`` CLI inside it.

Why an in-tree backend and not scikit-build-core or setuptools: it needs nothing from PyPI
(``requires = []``), so the usual isolated build and ``--no-build-isolation`` both work on a
machine with no package index; the build itself is plain CMake + Ninja from Debian's packages;
and a wheel is a zip file with three text files, which the standard library writes.

Options (environment variables, or ``pip install . --config-settings NAME=VALUE``):
  LOOM_WITH_CUDA, LOOM_WITH_MPI (ON | OFF | AUTO), CMAKE_CUDA_ARCHITECTURES, CMAKE_BUILD_TYPE,
  and any other ``-D`` for CMake through config settings (``cmake.define.NAME=VALUE`` also
  works); LOOM_CMAKE_ARGS: extra CMake arguments; LOOM_BUILD_DIR: the build folder (default
  ``build/`` of the source tree, shared with scripts/build.sh, so a built tree installs at once);
  LOOM_JOBS: parallel jobs (default 2).
"""
import base64
import hashlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tempfile
import time
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NAME = "loom"
SUMMARY = "Dataflow-graph framework for data-parallel training with a Fluid-compatible Python API"

# What a failed CMake configure says -> the Debian packages that provide it.
MISSING = [
    (r"Could NOT find Protobuf|protoc", "libprotobuf-dev protobuf-compiler"),
    (r"Could NOT find BLAS", "libopenblas-dev"),
    (r"Eigen3", "libeigen3-dev"),
    (r"pybind11", "pybind11-dev"),
    (r"Could NOT find Python", "python3-dev"),
    (r"Could NOT find ZLIB", "zlib1g-dev"),
    (r"Could NOT find PkgConfig", "pkg-config"),
    (r"nlohmann_json", "nlohmann-json3-dev"),
    (r"gflags", "libgflags-dev"),
    (r"glog", "libgoogle-glog-dev"),
    (r"Could NOT find MPI", "libopenmpi-dev openmpi-bin (or LOOM_WITH_MPI=OFF)"),
    (r"No CMAKE_CUDA_COMPILER|no CUDA compiler", "the CUDA toolkit (or LOOM_WITH_CUDA=OFF)"),
]
OPTION_ENV = ("LOOM_WITH_CUDA", "LOOM_WITH_MPI", "CMAKE_CUDA_ARCHITECTURES", "CMAKE_BUILD_TYPE")


class BuildError(RuntimeError):
    pass


def version():
    """The one version number: project(loom VERSION x.y.z) in CMakeLists.txt."""
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        m = re.search(r"project\(\s*loom\b[^)]*\bVERSION\s+([0-9][0-9.]*)", f.read())
    if not m:
        raise BuildError("CMakeLists.txt: no project(loom ... VERSION x.y.z)")
    return m.group(1)


def _defines(config_settings):
    defines = {"CMAKE_BUILD_TYPE": "Release", "LOOM_BUILD_TESTS": None,
               "LOOM_BUILD_BENCH": None}
    for key in OPTION_ENV:
        if os.environ.get(key):
            defines[key] = os.environ[key]
    for key, value in (config_settings or {}).items():
        if key.startswith("cmake.define."):
            key = key[len("cmake.define."):]
        if key in ("LOOM_CMAKE_ARGS", "LOOM_BUILD_DIR", "LOOM_JOBS"):
            continue
        if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
            raise BuildError("config setting %r is not a CMake variable name" % key)
        defines[key] = value if isinstance(value, str) else " ".join(value)
    return defines


def _setting(config_settings, key, default=None):
    return (config_settings or {}).get(key) or os.environ.get(key) or default


def _run(cmd, what, log):
    """Runs cmd; its output goes to stderr (shown by pip -v) and to the log for errors."""
    sys.stderr.write("loom build: %s\n" % " ".join(shlex.quote(c) for c in cmd))
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=dict(os.environ, CCACHE_BASEDIR=ROOT))
    out = []
    for line in proc.stdout:
        out.append(line)
        sys.stderr.write(line)
    proc.wait()
    log.extend(out)
    if proc.returncode != 0:
        text = "".join(out)
        hints = sorted({pkg for pattern, pkg in MISSING if re.search(pattern, text)})
        hint = ("; missing Debian package(s): %s (scripts/install-deps.sh installs all of Loom's)"
                % ", ".join(hints)) if hints else ""
        tail = "".join(out[-25:])
        raise BuildError("%s failed (exit %d)%s\n%s" % (what, proc.returncode, hint, tail))


def _build(config_settings):
    """Configures and builds the CMake project; returns the folder holding the installed loom/."""
    for tool, pkg in (("cmake", "cmake"), ("ninja", "ninja-build")):
        if shutil.which(tool) is None:
            raise BuildError("%s not found: install Debian's %s (scripts/install-deps.sh installs "
                             "all of Loom's build dependencies)" % (tool, pkg))
    build = os.path.abspath(_setting(config_settings, "LOOM_BUILD_DIR",
                                     os.path.join(ROOT, "build")))
    jobs = str(_setting(config_settings, "LOOM_JOBS", "2"))
    cmd = ["cmake", "-S", ROOT, "-B", build]
    cache = os.path.join(build, "CMakeCache.txt")
    cached_python = None
    if os.path.exists(cache):
        with open(cache) as f:
            m = re.search(r"^Python_EXECUTABLE:[A-Z]+=(.*)$", f.read(), re.M)
        cached_python = m.group(1) if m else None
    else:
        cmd += ["-G", "Ninja"]
    # The interpreter itself, not a venv's link to it (a venv may go; the build folder stays).
    python = os.path.realpath(sys.executable)
    if cached_python is None or os.path.realpath(cached_python) != python:
        cmd.append("-DPython_EXECUTABLE=" + python)
    for key, value in _defines(config_settings).items():
        if value is not None:
            cmd.append("-D%s=%s" % (key, value))
    cmd += shlex.split(_setting(config_settings, "LOOM_CMAKE_ARGS", ""))
    log = []
    _run(cmd, "CMake configure", log)
    _run(["cmake", "--build", build, "--target", "loom_cli", "loom_python", "-j", jobs],
         "the build", log)
    stage = tempfile.mkdtemp(prefix="loom-wheel-")
    _run(["cmake", "--install", build, "--prefix", stage], "cmake --install", log)
    return os.path.join(stage, "python"), stage


def _tag():
    impl = "cp%d%d" % sys.version_info[:2]
    abi = impl + getattr(sys, "abiflags", "")
    plat = re.sub(r"[-.]", "_", sysconfig.get_platform())
    return "%s-%s-%s" % (impl, abi, plat)


def _native_requirements(pkg_dir):
    """The Debian packages of the shared libraries libloom loads (read with ldd and dpkg)."""
    lib = os.path.join(pkg_dir, "loom", "libloom.so")
    try:
        out = subprocess.run(["ldd", lib], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return []
    pkgs = set()
    for line in out.splitlines():
        m = re.match(r"\s*(\S+) => (/\S+)", line)
        if not m or re.match(r"(libc|libm|libdl|librt|libpthread|ld-linux)[.-]", m.group(1)):
            continue
        try:
            owner = subprocess.run(["dpkg-query", "-S", os.path.realpath(m.group(2))],
                                   capture_output=True, text=True, check=True).stdout
            pkgs.add(owner.split(":")[0])
        except (OSError, subprocess.CalledProcessError):
            pkgs.add(os.path.basename(m.group(2)))
    return sorted(pkgs)


def _metadata(native):
    lines = [
        "Metadata-Version: 2.1",
        "Name: " + NAME,
        "Version: " + version(),
        "Summary: " + SUMMARY,
        "Requires-Python: >=3.9",
        # pybind11 2.10 (Debian 12) reads numpy's 1.x C API.
        "Requires-Dist: numpy>=1.21,<2",
        "Description-Content-Type: text/markdown",
        "",
        "Loom trains a single-device program on many devices and machines (allreduce, owner "
        "mode, MPI). `import loom as fluid` gives the Fluid 1.x API; `loom --help` the CLI.",
        "",
    ]
    if native:
        lines.append("Native libraries this build loads (Debian packages): " + ", ".join(native))
    return "\n".join(lines) + "\n"


def _record_line(arcname, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "%s,sha256=%s,%d" % (arcname, digest, len(data))


def _write(zf, arcname, data, mode=0o644):
    info = zipfile.ZipInfo(arcname, date_time=time.gmtime(
        int(os.environ.get("SOURCE_DATE_EPOCH", "315532800")))[:6])
    info.external_attr = (0o100000 | mode) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


# ---- PEP 517 hooks ------------------------------------------------------------------------------

def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    pkg_dir, stage = _build(config_settings)
    try:
        ver = version()
        dist_info = "%s-%s.dist-info" % (NAME, ver)
        name = "%s-%s-%s.whl" % (NAME, ver, _tag())
        path = os.path.join(wheel_directory, name)
        records = []
        with zipfile.ZipFile(path + ".part", "w") as zf:
            for base, dirs, files in os.walk(os.path.join(pkg_dir, NAME)):
                dirs.sort()
                for f in sorted(files):
                    if f.endswith(".pyc"):
                        continue
                    full = os.path.join(base, f)
                    arc = os.path.relpath(full, pkg_dir).replace(os.sep, "/")
                    with open(full, "rb") as fh:
                        data = fh.read()
                    _write(zf, arc, data, 0o755 if os.access(full, os.X_OK) else 0o644)
                    records.append(_record_line(arc, data))
            meta = {
                "METADATA": _metadata(_native_requirements(pkg_dir)),
                "WHEEL": "Wheel-Version: 1.0\nGenerator: loom_build_backend %s\n"
                         "Root-Is-Purelib: false\nTag: %s\n" % (ver, _tag()),
                "entry_points.txt": "[console_scripts]\nloom = loom._cli:main\n",
                "top_level.txt": NAME + "\n",
            }
            for f, text in meta.items():
                data = text.encode()
                _write(zf, dist_info + "/" + f, data)
                records.append(_record_line(dist_info + "/" + f, data))
            records.append(dist_info + "/RECORD,,")
            _write(zf, dist_info + "/RECORD", ("\n".join(records) + "\n").encode())
        os.replace(path + ".part", path)
        return name
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def build_sdist(sdist_directory, config_settings=None):
    """The tracked source files (git ls-files; without git, the tree less build folders)."""
    ver = version()
    base = "%s-%s" % (NAME, ver)
    try:
        files = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], capture_output=True,
                               check=True).stdout.decode().split("\0")
        files = [f for f in files if f and os.path.isfile(os.path.join(ROOT, f))]
    except (OSError, subprocess.CalledProcessError):
        files = []
        for d, dirs, fs in os.walk(ROOT):
            dirs[:] = [x for x in dirs if not (x.startswith("build") or x.startswith("."))]
            files += [os.path.relpath(os.path.join(d, f), ROOT) for f in fs]
    name = base + ".tar.gz"
    path = os.path.join(sdist_directory, name)
    with tarfile.open(path + ".part", "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for f in sorted(files):
            tf.add(os.path.join(ROOT, f), arcname=base + "/" + f, recursive=False)
        pkg_info = _metadata([]).encode()
        info = tarfile.TarInfo(base + "/PKG-INFO")
        info.size = len(pkg_info)
        info.mode = 0o644
        tf.addfile(info, io.BytesIO(pkg_info))
    os.replace(path + ".part", path)
    return name
