#!/usr/bin/env bash
# README command 2: set everything up and run every check: lint, types, the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each step is announced with the time it starts, so a slow step shows in the log.
say() { echo "== $* ($(date +%T))" >&2; }
bash scripts/setup-venv.sh
bin=.venv/bin
say "ruff" && "$bin/ruff" check .
say "ruff format" && "$bin/ruff" format --check .
say "mypy" && "$bin/mypy"
say "import layers" && "$bin/lint-imports" --no-cache
# The tests marked `slurm` start a local Slurm, installed here (as root) when missing;
# `-m "not slurm"` leaves them out and needs neither Slurm nor root.
if [[ " $* " != *"not slurm"* ]]; then
    say "slurm (installed if missing)" && bash scripts/install-slurm.sh
fi
# Generated job scripts must pass shellcheck (tests/launch/test_render_quoting.py skips without it).
if ! command -v shellcheck >/dev/null; then
    if [[ $(id -u) -eq 0 ]]; then
        say "shellcheck (installing with apt-get)"
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq shellcheck >/dev/null
    else
        echo "warning: shellcheck is missing, so its test is skipped. HINT: sudo apt-get install -y shellcheck" >&2
    fi
fi
# Two worker processes (pytest-xdist): the Slurm tests mostly wait on jobs, and the other tests
# use the cores meanwhile (tests/conftest.py keeps a file's tests, and all Slurm tests, in one
# worker). SCALETRAIN_TEST_WORKERS=0 runs them in this one process.
workers=${SCALETRAIN_TEST_WORKERS:-2}
parallel=()
[[ $workers != 0 ]] && parallel=(-n "$workers" --dist loadgroup)
say "pytest" && "$bin/pytest" "${parallel[@]}" "$@"
# The fast tiers (checkpoint, runtime, train, launch, diagnose) again on the oldest and the newest
# torch the package declares (src/scaletrain/core/torch_support.toml), each in a venv of its
# own; a run of the whole suite only (no arguments). The opt-in direct storage is left out
# there: on those versions it is never used (checkpoints go through DCP, tested already).
# SCALETRAIN_TORCH_MATRIX=0 leaves them out.
if [[ $# -eq 0 && ${SCALETRAIN_TORCH_MATRIX:-1} != 0 ]]; then
    versions=$("$bin/python" -c 'from scaletrain.core.torch_support import torch_support as t
print(t().oldest, t().newest)')
    for version in $versions; do
        bash scripts/setup-torch-venv.sh "$version"
        say "pytest, fast tiers, torch $version"
        ".venv-torch-$version/bin/pytest" "${parallel[@]}" -m "not slurm and not long" \
            -k "not direct or public_api_only" \
            tests/checkpoint tests/runtime tests/train tests/launch tests/diagnose
    done
    say "pytest, checkpoints across torch releases"
    # shellcheck disable=SC2086 # one word per version
    SCALETRAIN_TORCH_VENVS=$(printf '.venv-torch-%s ' $versions) "$bin/pytest" \
        tests/checkpoint/test_across_torch_versions.py
fi
say "all checks passed"
