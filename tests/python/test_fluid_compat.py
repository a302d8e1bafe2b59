"""docs/PYTHON.md's Fluid 1.8 compatibility table is what scripts/fluid_compat.py computes from
Loom as built (regenerate with `scripts/fluid_compat.py --write`); the core helpers Fluid's
tests call exist, and APIs removed by design name their replacement."""
import importlib.util
import os

import pytest

import loom as fluid

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def load_script():
    spec = importlib.util.spec_from_file_location(
        "fluid_compat", os.path.join(ROOT, "scripts", "fluid_compat.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_docs_table_is_current():
    compat = load_script()
    doc = open(os.path.join(ROOT, "docs", "PYTHON.md"), encoding="utf-8").read()
    a, b = doc.index(compat.BEGIN), doc.index(compat.END) + len(compat.END)
    assert doc[a:b] == compat.table(), (
        "docs/PYTHON.md's Fluid compatibility table is out of date: run "
        "PYTHONPATH=build/python /usr/bin/python3 scripts/fluid_compat.py --write")


def test_every_name_is_classified_once():
    compat = load_script()
    for mod, (done, ignored, missing) in compat.status().items():
        names = set(compat.FLUID_18[mod].split())
        got = done + [n for n, _ in ignored] + [n for n, _ in missing]
        assert sorted(got) == sorted(names), mod


def test_core_helpers_fluid_tests_call():
    from loom import core
    assert core.get_cuda_device_count() == core.cuda_device_count()
    assert core.is_float16_supported(fluid.CPUPlace()) is False
    if core.cuda_device_count() == 0:
        assert core.is_float16_supported(fluid.CUDAPlace(0)) is False
    with pytest.raises(TypeError, match="place"):
        core.is_float16_supported("cpu")
    assert core.CUDAPlace(0) == fluid.CUDAPlace(0)


@pytest.mark.parametrize("name,hint", [("ParallelDo", "with_data_parallel"),
                                       ("get_places", "cpu_places")])
def test_removed_apis_name_their_replacement(name, hint):
    with pytest.raises(NotImplementedError, match=hint):
        getattr(fluid.layers, name)()
