#!/usr/bin/env bash
# Installs dependencies, builds Loom and runs every test: the GoogleTest suites through ctest,
# then the Python tests (pytest on Debian's /usr/bin/python3), then `pip install .` into a fresh
# virtualenv with a smoke test of the installed package, then a short libFuzzer run of the
# program loader/verifier, then the sanitizer builds (scripts/ci-sanitizers.sh; LOOM_SANITIZERS=0
# skips them). The build pins MPI, so a missing dependency fails instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh -DLOOM_WITH_MPI=ON
echo "== ctest"
(cd build && ctest --output-on-failure -j2 --timeout 600)
echo "== pytest"
LOOM_BUILD_DIR="$PWD/build" /usr/bin/python3 -m pytest -q tests/python
echo "== pip install . (fresh venv; the installed package, not the build tree)"
bash scripts/pip-smoke.sh
echo "== fuzz"
bash scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-30}"
if [ "${LOOM_SANITIZERS:-1}" != 0 ]; then
  echo "== sanitizers"
  bash scripts/ci-sanitizers.sh
fi
echo "== all tests passed"
