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

echo
echo "== Python: Fashion-MNIST MLP, one epoch (examples/fashion_mnist.py)"
if [ -d /usr/share/datasets/fashion-mnist ]; then
  PYTHONPATH=build/python /usr/bin/python3 examples/fashion_mnist.py --model mlp --epochs 1
else
  echo "Fashion-MNIST not installed (Debian package dataset-fashion-mnist); skipping"
fi
