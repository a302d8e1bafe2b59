"""docs/PYTHON.md's Fluid 1.8 compatibility table is what scripts/fluid_compat.py computes from
Loom as built (regenerate with `scripts/fluid_compat.py --write`)."""
import importlib.util
import os

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
