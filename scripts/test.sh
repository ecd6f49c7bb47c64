#!/usr/bin/env bash
# README command 2: set everything up and run every check: lint, types, the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
bin=.venv/bin
echo "== ruff" >&2 && "$bin/ruff" check .
echo "== ruff format" >&2 && "$bin/ruff" format --check .
echo "== mypy" >&2 && "$bin/mypy"
echo "== import layers" >&2 && "$bin/lint-imports" --no-cache
echo "== slurm (installed if missing)" >&2 && bash scripts/install-slurm.sh
# Generated job scripts must pass shellcheck (tests/launch/test_render.py).
if ! command -v shellcheck >/dev/null; then
    if [[ $(id -u) -ne 0 ]]; then
        echo "error: shellcheck is missing. HINT: sudo apt-get install -y shellcheck" >&2
        exit 2
    fi
    echo "== shellcheck (installing with apt-get)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
fi
echo "== pytest" >&2 && "$bin/pytest" "$@"
