#!/usr/bin/env bash
# Installs Loom with `pip install .` into a fresh virtualenv (with Debian's numpy and pytest:
# --system-site-packages) and checks the *installed* package, not the build tree:
# `import loom` and `loom --version` agree, `loom --help`, `loom run` on a bundle saved from
# Python, a 2-place with_data_parallel run, and a smoke subset of the Python tests.
# Offline: pip takes nothing from an index (the build backend needs nothing, numpy is Debian's).
# With --fresh the venv has no system packages and pip fetches numpy from PyPI (the pytest
# subset then runs only if pytest is importable).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${1:-}" = --fresh ]; then
  /usr/bin/python3 -m venv "$tmp/venv"
  "$tmp/venv/bin/pip" install --quiet "$ROOT"
else
  /usr/bin/python3 -m venv --system-site-packages "$tmp/venv"
  "$tmp/venv/bin/pip" install --no-index --quiet "$ROOT"
fi
# shellcheck disable=SC1091
. "$tmp/venv/bin/activate"
cd "$tmp"  # away from the source tree: only the installed package can be imported
unset PYTHONPATH
where=$(python -c 'import loom; print(loom.__file__)')
case "$where" in "$tmp/venv/"*) ;; *) echo "FAIL: loom imported from $where"; exit 1 ;; esac
py_version=$(python -c 'import loom; print(loom.__version__)')
cli=$(command -v loom)
[ "$cli" = "$tmp/venv/bin/loom" ] || { echo "FAIL: loom on PATH is $cli"; exit 1; }
cli_version=$(loom --version)
case "$cli_version" in "loom $py_version "*) ;; *)
  echo "FAIL: loom --version says '$cli_version', loom.__version__ is $py_version"; exit 1 ;;
esac
# Whole outputs, then grep: `cmd | grep -q` under pipefail fails at random when grep exits
# before cmd has written everything (cmd then dies of SIGPIPE, or pip reports a broken pipe).
grep -q "transpile DIR" <<< "$(loom --help)" || { echo "FAIL: loom --help"; exit 1; }
grep -q "^Requires: numpy" <<< "$(pip show loom)" || { echo "FAIL: pip show loom lacks numpy"; exit 1; }
python - <<'PY'
import subprocess
import numpy as np
import loom as fluid

main, startup = fluid.Program(), fluid.Program()
main.random_seed = startup.random_seed = 1
with fluid.program_guard(main, startup):
    x = fluid.layers.data("x", [4])
    y = fluid.layers.data("y", [1], dtype="int64")
    loss = fluid.layers.mean(fluid.layers.softmax_with_cross_entropy(fluid.layers.fc(x, 3), y))
    fluid.optimizer.SGD(0.5).minimize(loss)
rng = np.random.RandomState(0)
xs = rng.randn(64, 4).astype("float32")
ys = (xs[:, :1] > 0).astype("int64") + (xs[:, 1:2] > 0)
fluid.io.save_program_bundle("bundle", main, startup, ["x", "y"], [loss],
                             data={"x": xs, "y": ys}, batch_size=16)
out = subprocess.run(["loom", "run", "bundle", "--iters", "40"], capture_output=True,
                     text=True, check=True).stdout
assert "done: 40 iterations" in out, out
print(out.strip().splitlines()[-1])

exe = fluid.Executor(fluid.CPUPlace())
exe.run(startup)
compiled = fluid.CompiledProgram(main).with_data_parallel(loss_name=loss.name,
                                                          places=fluid.cpu_places(2))
first = last = None
for step in range(30):
    l, = exe.run(compiled, feed={"x": xs[:16], "y": ys[:16]}, fetch_list=[loss])
    first = np.mean(l) if first is None else first
    last = np.mean(l)
assert last < first, (first, last)
print("2-place with_data_parallel: loss %.4f -> %.4f" % (first, last))
PY
if python -c 'import pytest' 2>/dev/null; then
  LOOM_TEST_INSTALLED=1 python -m pytest -q -p no:cacheprovider \
    "$ROOT/tests/python/test_optimizers.py" "$ROOT/tests/python/test_io_reader_feeder.py"
fi
echo "numpy $(python -c 'import numpy; print(numpy.__version__)') from $(python -c 'import numpy, os; print(os.path.dirname(numpy.__file__))')"
echo "pip-smoke: PASS (loom $py_version installed in a fresh venv)"
