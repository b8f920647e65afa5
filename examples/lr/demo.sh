#!/usr/bin/env bash
# Builds examples/lr and trains it on real data with 2 servers and 2 workers:
#   1. heart_scale (270 examples, 13 features): binary logistic regression,
#      5-fold cross-validation, BSP, next to liblinear's own 5-fold accuracy;
#   2. Fashion-MNIST (60,000 + 10,000 images): softmax regression, ASP,
#      with the model and a plot written to build/, then scored again by the
#      stand-alone predict mode.
# Needs the Debian packages liblinear-tools and dataset-fashion-mnist
# (`make deps` installs them). Takes one to two minutes on 2 cores.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
HEART=/usr/share/doc/liblinear-tools/examples/heart_scale
FM=/usr/share/datasets/fashion-mnist
for need in "$HEART:liblinear-tools" "$FM/train-images-idx3-ubyte.gz:dataset-fashion-mnist"; do
  if [ ! -e "${need%%:*}" ]; then
    echo "demo: ${need%%:*} is missing; install the Debian package ${need#*:} (make deps)" >&2
    exit 1
  fi
done
export PS_LOCAL_TIMEOUT=${PS_LOCAL_TIMEOUT:-300}
mkdir -p build
go build -o build/ ./examples/lr

echo "== heart_scale: binary logistic regression, 5-fold cross-validation, 2 servers x 2 workers, BSP"
scripts/local.sh 2 2 build/lr -train="$HEART" -cv=5 -epochs=10 -batch=8 -lr=0.1 -sync=bsp \
  -plot=build/lr-heart.png | grep -v '^fold [1-4]/'
if command -v liblinear-train >/dev/null; then
  echo "liblinear (liblinear-train -s 0 -v 5): $(cd build && liblinear-train -s 0 -v 5 "$HEART" | tail -1)"
fi

echo
echo "== Fashion-MNIST: softmax regression, 2 servers x 2 workers, ASP, SGD"
scripts/local.sh 2 2 build/lr -train="$FM/train-images-idx3-ubyte.gz" -test="$FM/t10k-images-idx3-ubyte.gz" \
  -loss=softmax -opt=sgd -lr=1 -lr-decay=2 -batch=100 -epochs=20 -sync=asp \
  -model=build/lr-fashion.model -plot=build/lr-fashion.png
echo "predict (stand-alone, no cluster): $(build/lr -mode=predict -model=build/lr-fashion.model -data="$FM/t10k-images-idx3-ubyte.gz")"
