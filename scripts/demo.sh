#!/usr/bin/env bash
# Installs dependencies, builds Loom, writes the example bundles and trains the softmax
# classifier with `loom run`, printing the loss as it falls.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
OUT=build/examples_out
build/examples/loom_make_examples "$OUT"
echo
echo "== loom inspect $OUT/softmax_classifier/main.pb (first lines)"
build/tools/loom inspect "$OUT/softmax_classifier/main.pb" | head -n 25
echo
echo "== loom run $OUT/softmax_classifier"
build/tools/loom run "$OUT/softmax_classifier" --iters 200 --print-every 20 \
  --save-params "$OUT/softmax_classifier_params"
