"""The pip build backend (python/build_backend): options, error messages, version, sdist."""
import os
import sys
import tarfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python", "build_backend"))
import loom_build_backend as backend  # noqa: E402


def test_version_is_the_cmake_project_version_and_the_module_reports_it():
    import loom
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        assert "VERSION %s" % backend.version() in f.read()
    assert loom.__version__ == backend.version()


def test_options_come_from_the_environment_and_config_settings(monkeypatch):
    monkeypatch.setenv("LOOM_WITH_CUDA", "OFF")
    d = backend._defines({"CMAKE_CUDA_ARCHITECTURES": "80",
                          "cmake.define.LOOM_WITH_MPI": "OFF", "LOOM_JOBS": "4"})
    assert d["LOOM_WITH_CUDA"] == "OFF"
    assert d["CMAKE_CUDA_ARCHITECTURES"] == "80"
    assert d["LOOM_WITH_MPI"] == "OFF"
    assert d["CMAKE_BUILD_TYPE"] == "Release"
    assert "LOOM_JOBS" not in d  # a backend setting, not a CMake variable
    with pytest.raises(backend.BuildError, match="is not a CMake variable name"):
        backend._defines({"-DX": "1"})


def test_a_failed_configure_names_the_missing_debian_package():
    cmd = [sys.executable, "-c",
           "print('CMake Error: Could NOT find Protobuf (missing: Protobuf_LIBRARIES)');"
           "raise SystemExit(1)"]
    with pytest.raises(backend.BuildError) as e:
        backend._run(cmd, "CMake configure", [])
    msg = str(e.value)
    assert "CMake configure failed (exit 1)" in msg
    assert "libprotobuf-dev protobuf-compiler" in msg
    assert "Could NOT find Protobuf" in msg  # the end of CMake's output follows


def test_missing_cmake_is_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(backend.BuildError, match="cmake not found: install Debian's cmake"):
        backend._build({})


def test_wheel_tag_and_metadata():
    tag = backend._tag()
    assert tag.startswith("cp%d%d-cp%d%d" % (sys.version_info[:2] * 2))
    meta = backend._metadata(["libprotobuf32"])
    assert "Version: %s\n" % backend.version() in meta
    assert "Requires-Dist: numpy>=1.21,<2\n" in meta
    assert "libprotobuf32" in meta
    assert backend.get_requires_for_build_wheel() == []


def test_sdist_holds_the_tracked_sources(tmp_path):
    name = backend.build_sdist(str(tmp_path))
    with tarfile.open(os.path.join(str(tmp_path), name)) as tf:
        names = set(tf.getnames())
    base = name[:-len(".tar.gz")]
    for f in ("pyproject.toml", "CMakeLists.txt", "python/build_backend/loom_build_backend.py",
              "framework/framework.proto", "PKG-INFO"):
        assert base + "/" + f in names, f
    assert not any("/build/" in n for n in names)
