"""The structure of the Python package, read from its sources with `ast` (nothing is imported):
no import cycle between its modules, fewer than 10 imports inside functions, and no module over
800 lines.

The import graph has an edge from a module to every module of the package it imports, at the
top or inside a function, absolute (``loom.x``) or relative (``.x``, ``..x``); importing
``loom.a.b`` from outside ``loom.a`` also runs ``loom/a/__init__.py``, so it is an edge to
``loom.a`` too. ``loom.core`` (the C++ module) has no sources and is left out.
"""
import ast
import os

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PACKAGE = os.path.join(ROOT, "python", "loom")

MAX_IMPORTS_IN_FUNCTIONS = 9
MAX_LINES = 800


def package_modules(package_dir):
    """{dotted module name: path} of every .py file under package_dir."""
    top = os.path.basename(os.path.normpath(package_dir))
    out = {}
    for base, dirs, files in os.walk(package_dir):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(base, f), package_dir)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            out[".".join([top] + rel)] = os.path.join(base, f)
    return out


def _imports(tree):
    """(import node, whether it is inside a function) for every import of the module."""
    out = []

    def walk(node, in_function):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                out.append((child, in_function))
            walk(child, in_function or isinstance(
                child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))
    walk(tree, False)
    return out


def _targets(node, name, is_package, modules):
    """The package modules an import statement of module `name` loads."""
    candidates = []
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        if node.level:
            parts = name.split(".") if is_package else name.split(".")[:-1]
            if node.level > 1:
                parts = parts[:len(parts) - (node.level - 1)]
            base = ".".join(parts + ([node.module] if node.module else []))
        else:
            base = node.module
        candidates.append(base)
        for alias in node.names:  # `from pkg import mod` loads pkg.mod
            if "%s.%s" % (base, alias.name) in modules:
                candidates.append("%s.%s" % (base, alias.name))
    own = name if is_package else name.rpartition(".")[0]
    targets = set()
    for target in candidates:
        parts = target.split(".")
        for i in range(1, len(parts) + 1):
            prefix = ".".join(parts[:i])
            # Ancestors of the importing module are initialized already.
            if prefix in modules and prefix != name and not (own + ".").startswith(prefix + "."):
                targets.add(prefix)
    return targets


def import_graph(package_dir):
    """(graph {module: {imported modules}}, [(module, line, statement) of imports inside
    functions], {module: line count})."""
    modules = package_modules(package_dir)
    graph, in_functions, lines = {}, [], {}
    for name, path in modules.items():
        with open(path) as f:
            source = f.read()
        lines[name] = len(source.splitlines())
        tree = ast.parse(source, path)
        graph[name] = set()
        for node, in_function in _imports(tree):
            graph[name] |= _targets(node, name, path.endswith("__init__.py"), modules)
            if in_function:
                in_functions.append((name, node.lineno, ast.unparse(node)))
    return graph, in_functions, lines


def find_cycles(graph):
    """One cycle [a, b, ..., a] per strongly connected component that has one."""
    index, low, on_stack, stack, sccs = {}, {}, set(), [], []

    def connect(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                sccs.append(set(scc))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for scc in sccs:
        start = min(scc)
        # The shortest way back to start within the component (breadth first).
        paths, seen, cycle = [[start]], {start}, None
        while paths and cycle is None:
            nxt = []
            for p in paths:
                for w in sorted(graph[p[-1]] & scc):
                    if w == start:
                        cycle = p + [start]
                        break
                    if w not in seen:
                        seen.add(w)
                        nxt.append(p + [w])
                if cycle:
                    break
            paths = nxt
        cycles.append(cycle)
    return cycles


@pytest.fixture(scope="module")
def package():
    return import_graph(PACKAGE)


def test_the_package_is_found(package):
    graph, _, _ = package
    assert {"loom", "loom.framework", "loom.layers", "loom.layers.nn"} <= set(graph)
    assert "loom.layers.tensor" in graph["loom.layers.nn"]
    assert "loom.layers" in graph["loom.optimizer"]  # importing loom.layers.x runs layers/


def test_no_import_cycle(package):
    graph, _, _ = package
    cycles = find_cycles(graph)
    assert not cycles, "import cycle(s) in python/loom:\n" + "\n".join(
        "  " + " -> ".join(c) for c in cycles)


def test_few_imports_inside_functions(package):
    _, in_functions, _ = package
    listing = "\n".join("  %s:%d: %s" % item for item in in_functions)
    print("imports inside functions: %d\n%s" % (len(in_functions), listing))
    assert len(in_functions) <= MAX_IMPORTS_IN_FUNCTIONS, (
        "%d imports inside functions (at most %d; import at the top of the module, moving "
        "what two modules share into a lower one):\n%s"
        % (len(in_functions), MAX_IMPORTS_IN_FUNCTIONS, listing))


def test_no_module_over_800_lines(package):
    _, _, lines = package
    long = sorted((n, name) for name, n in lines.items() if n > MAX_LINES)
    assert not long, "modules over %d lines: %s" % (
        MAX_LINES, ", ".join("%s (%d)" % (name, n) for n, name in long))


def _write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)


def test_cycles_are_found(tmp_path):
    """The checks above can fail: cycles through relative, absolute, function-level and
    package imports are reported, each as a path back to where it starts."""
    pkg = str(tmp_path / "demo")
    _write(pkg, {
        "__init__.py": "from . import a\n",
        "a.py": "from .sub import b\n",
        "b.py": "def f():\n    import demo.a\n",
        "sub/__init__.py": "",
        "sub/b.py": "from ..b import f\n",
        "c.py": "from . import d\n",
        "d.py": "from .c import x\n",
        "ok.py": "from .sub import b\nfrom . import c\n",
    })
    graph, in_functions, lines = import_graph(pkg)
    assert graph["demo.a"] == {"demo.sub", "demo.sub.b"}
    assert graph["demo.sub.b"] == {"demo.b"}
    assert in_functions == [("demo.b", 2, "import demo.a")]
    assert lines["demo.b"] == 2
    cycles = sorted(find_cycles(graph))
    assert cycles == [
        ["demo.a", "demo.sub.b", "demo.b", "demo.a"],
        ["demo.c", "demo.d", "demo.c"],
    ], cycles
