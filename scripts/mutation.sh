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
    # The functions that decide money and correctness first, then the rest of each module,
    # so that an interrupted run has reported on every area.
    groups=(
        'scaletrain.clusters.billing*' 'scaletrain.launch.shell_text*'
        'scaletrain.train.data.x_per_rank_batch_size*' 'scaletrain.train.data.xǁEpochSampler*'
        'scaletrain.train.data.xǁEvalSampler*'
        'scaletrain.checkpoint.layout.xǁCheckpointStore*'
        'scaletrain.runtime.launchers.slurm.x_*' 'scaletrain.runtime.launchers.x*'
        'scaletrain.planning.partitions.x_shape_for*' 'scaletrain.planning.partitions.x_misfits*'
        'scaletrain.planning.partitions.x_choose_partition*'
        'scaletrain.planning.planner.x__per_gpu*' 'scaletrain.planning.planner.x__allocation*'
        'scaletrain.planning.planner.x__estimate*' 'scaletrain.planning.planner.x__above*'
        'scaletrain.planning.planner.x_plan_job*'
        'scaletrain.launch.job_script.x_resource_options*' 'scaletrain.launch.job_script.x_sbatch*'
        'scaletrain.launch.job_script.x_stop_margin*'
        'scaletrain.runtime.launchers.slurm*' 'scaletrain.runtime.launchers.torchrun*'
        'scaletrain.runtime.launchers.mpi*' 'scaletrain.runtime.layout*' 'scaletrain.train.data*'
        'scaletrain.checkpoint.layout*' 'scaletrain.planning*' 'scaletrain.launch.job_script*'
    )
fi
for group in "${groups[@]}"; do
    echo "== mutmut run $group" >&2
    .venv/bin/mutmut run --max-children "${MUTATION_PROCESSES:-2}" "$group" || true
done
.venv/bin/python scripts/mutation_report.py
