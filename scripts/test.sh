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
# The tests marked `slurm` start a local Slurm, installed here (as root) when missing;
# `-m "not slurm"` leaves them out and needs neither Slurm nor root.
if [[ " $* " != *"not slurm"* ]]; then
    echo "== slurm (installed if missing)" >&2 && bash scripts/install-slurm.sh
fi
# Generated job scripts must pass shellcheck (tests/launch/test_render.py skips without it).
if ! command -v shellcheck >/dev/null; then
    if [[ $(id -u) -eq 0 ]]; then
        echo "== shellcheck (installing with apt-get)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
    else
        echo "warning: shellcheck is missing, so its test is skipped. HINT: sudo apt-get install -y shellcheck" >&2
    fi
fi
echo "== pytest" >&2 && "$bin/pytest" "$@"
# The fast tiers again on the oldest and the newest torch the package declares
# (src/scaletrain/core/torch_support.toml), each in a venv of its own; a run of the whole suite
# only (no arguments). SCALETRAIN_TORCH_MATRIX=0 leaves them out.
if [[ $# -eq 0 && ${SCALETRAIN_TORCH_MATRIX:-1} != 0 ]]; then
    versions=$("$bin/python" -c 'from scaletrain.core.torch_support import torch_support as t
print(t().oldest, t().newest)')
    for version in $versions; do
        bash scripts/setup-torch-venv.sh "$version"
        echo "== pytest, fast tiers, torch $version" >&2
        ".venv-torch-$version/bin/pytest" -m "not slurm and not long" \
            tests/checkpoint tests/train tests/runtime tests/launch tests/diagnose
    done
    echo "== pytest, checkpoints across torch releases" >&2
    SCALETRAIN_TORCH_VENVS=$(printf '.venv-torch-%s ' $versions) "$bin/pytest" \
        tests/checkpoint/test_across_torch_versions.py
fi
