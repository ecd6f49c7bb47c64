#!/usr/bin/env bash
# README command 1: set everything up, then train the MNIST example as 2 local CPU processes.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
# MNIST cannot be downloaded here: --create-small-data writes real scikit-learn digits in
# MNIST's own file format into .cache/mnist on the first run.
exec .venv/bin/scaletrain run --nproc 2 --name "demo-$(date +%Y%m%d-%H%M%S)" \
    examples/mnist/train.py --data-dir .cache/mnist --create-small-data "$@"
