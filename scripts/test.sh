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
# The whole suite (no arguments) runs as two pytest sessions side by side: the Slurm tests,
# which mostly wait on their jobs, in the background (one test Slurm cluster), and the others
# here, using the cores meanwhile. Each session counts its own leftovers. With arguments, or
# SCALETRAIN_TEST_SESSIONS=1, one session runs them.
if [[ $# -eq 0 && ${SCALETRAIN_TEST_SESSIONS:-2} != 1 ]]; then
    slurm_log=$(mktemp --tmpdir scaletrain-slurm-tests.XXXXXX.log)
    say "pytest, the Slurm tests in the background (their output follows the others')"
    "$bin/pytest" -m slurm >"$slurm_log" 2>&1 &
    slurm_tests=$!
    say "pytest, every other test"
    others=0
    "$bin/pytest" -m "not slurm" || others=$?
    slurm=0
    wait "$slurm_tests" || slurm=$?
    say "pytest, the Slurm tests (ended)"
    cat "$slurm_log" && rm -f "$slurm_log"
    if [[ $others != 0 || $slurm != 0 ]]; then
        echo "error: tests failed (exit $others without Slurm, $slurm on Slurm): see above" >&2
        exit 1
    fi
else
    say "pytest" && "$bin/pytest" "$@"
fi
# The fast tiers (checkpoint, runtime, train, launch, diagnose) again on the oldest and the newest
# torch the package declares (src/scaletrain/core/torch_support.toml), each in a venv of its
# own; a run of the whole suite only (no arguments). The opt-in direct storage is left out
# there: on those versions it is never used (checkpoints go through DCP, tested already), and
# so is shellcheck over every job script, which no torch changes.
# SCALETRAIN_TORCH_MATRIX=0 leaves them out.
if [[ $# -eq 0 && ${SCALETRAIN_TORCH_MATRIX:-1} != 0 ]]; then
    versions=$("$bin/python" -c 'from scaletrain.core.torch_support import torch_support as t
print(t().oldest, t().newest)')
    for version in $versions; do
        bash scripts/setup-torch-venv.sh "$version"
        say "pytest, fast tiers, torch $version"
        ".venv-torch-$version/bin/pytest" -m "not slurm and not long" \
            -k "not direct or public_api_only" \
            --deselect tests/launch/test_render_quoting.py::test_every_mode_and_shape_passes_shellcheck \
            tests/checkpoint tests/runtime tests/train tests/launch tests/diagnose
    done
    say "pytest, checkpoints across torch releases"
    # shellcheck disable=SC2086 # one word per version
    SCALETRAIN_TORCH_VENVS=$(printf '.venv-torch-%s ' $versions) "$bin/pytest" \
        tests/checkpoint/test_across_torch_versions.py
fi
say "all checks passed"
