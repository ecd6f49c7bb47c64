#!/usr/bin/env bash
# README command 2: set everything up and run every check: lint, types, the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
bin=.venv/bin
echo "== ruff" >&2 && "$bin/ruff" check .
echo "== ruff format" >&2 && "$bin/ruff" format --check .
echo "== mypy" >&2 && "$bin/mypy"
echo "== slurm (installed if missing)" >&2 && bash scripts/install-slurm.sh
echo "== pytest" >&2 && "$bin/pytest" "$@"
