#!/usr/bin/env bash
# Mutation testing of the logic that decides money and correctness (pyproject.toml
# [tool.mutmut]): planning, billing, launcher detection, job-script rendering and quoting,
# the data split, checkpoint retention. Slow (about 2 hours on 2 shared cores), so not part of
# scripts/test.sh. Results are kept in mutants/: a rerun checks only what changed.
#
#   bash scripts/mutation.sh              # every module, then docs/mutation-report.md
#   bash scripts/mutation.sh 'scaletrain.clusters.billing*'   # some mutants only
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup-venv.sh
.venv/bin/python -m pip install --quiet -r requirements/mutation.txt 2>&1 | grep -v "is ignored" || true
if [[ $# -gt 0 ]]; then
    groups=("$@")
else
    # Cheapest and most important first, so that an interrupted run has reported on them.
    groups=(
        'scaletrain.clusters.billing*' 'scaletrain.launch.shell_text*' 'scaletrain.train.data*'
        'scaletrain.checkpoint.layout*' 'scaletrain.runtime.launchers.slurm*'
        'scaletrain.runtime.launchers.torchrun*' 'scaletrain.runtime.launchers.mpi*'
        'scaletrain.runtime.launchers.x*' 'scaletrain.runtime.layout*'
        'scaletrain.planning.request*' 'scaletrain.planning.modes*' 'scaletrain.planning.plan.*'
        'scaletrain.planning.partitions*' 'scaletrain.planning.planner*'
        'scaletrain.launch.job_script*'
    )
fi
for group in "${groups[@]}"; do
    echo "== mutmut run $group" >&2
    .venv/bin/mutmut run --max-children "${MUTATION_PROCESSES:-2}" "$group" || true
done
.venv/bin/python scripts/mutation_report.py
