#!/usr/bin/env bash
# Installs dependencies, builds Loom, writes the example bundles and trains the softmax
# classifier with `loom run`, printing the loss as it falls; then trains the Fashion-MNIST MLP
# in Python, and once more data-parallel: built in Python, saved, transpiled to 4 CPU places
# with `loom transpile`, trained with `loom run`, and evaluated on the test set; last on 2
# trainers and 2 parameter servers started by `loom launch` (2 epochs), evaluated the same way,
# and with a KVStore: 2 MPI clients of 2 workers each, elastic averaging SGD (loom.kvstore).
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

  FM=build/examples_out/fashion_mlp
  rm -rf "$FM" "$FM.4places" "$FM.params"
  echo
  echo "== Fashion-MNIST MLP on 4 CPU places: save (Python), loom transpile, loom run"
  PYTHONPATH=build/python /usr/bin/python3 examples/fashion_mnist.py --model mlp --epochs 0 \
    --save-bundle "$FM"
  build/tools/loom transpile "$FM" -o "$FM.4places" --places cpu:4 --mode allreduce
  build/tools/loom run "$FM.4places" --iters 2000 --batch-size 128 --print-every 250 \
    --save-params "$FM.params"
  PYTHONPATH=build/python /usr/bin/python3 examples/fashion_mnist.py --model mlp \
    --eval-params "$FM.params"

  rm -rf "$FM.ps" "$FM.ps.params"
  echo
  echo "== Fashion-MNIST MLP on 2 trainers x 2 parameter servers: loom transpile --mode pserver, loom launch"
  build/tools/loom transpile "$FM" -o "$FM.ps" --mode pserver --pservers 2 --trainers 2
  build/tools/loom launch --workers 2 --servers 2 -- build/tools/loom run "$FM.ps" --iters 938 \
    --batch-size 128 --print-every 200 --save-params "$FM.ps.params"
  PYTHONPATH=build/python /usr/bin/python3 examples/fashion_mnist.py --model mlp \
    --eval-params "$FM.ps.params"

  if command -v mpirun >/dev/null; then
    echo
    echo "== Fashion-MNIST MLP with a KVStore: 2 MPI clients x 2 workers, elastic averaging SGD"
    build/tools/loom launch --workers 4 --servers 2 --clients 2 -- env PYTHONPATH=build/python \
      /usr/bin/python3 examples/kvstore_train.py --kvstore dist_sync_mpi --esgd-interval 16 \
      --epochs 2
  fi
else
  echo "Fashion-MNIST not installed (Debian package dataset-fashion-mnist); skipping"
fi
