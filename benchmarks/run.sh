#!/usr/bin/env bash
# Run the diagnostics benchmarks: peers (Lightning Fabric, accelerate) from
# requirements/benchmarks.txt, results in benchmarks/results/, summary table at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/python -m pip install --quiet -r requirements/benchmarks.txt 2>&1 | grep -v "is ignored" || true
exec .venv/bin/python benchmarks/run_all.py "$@"
