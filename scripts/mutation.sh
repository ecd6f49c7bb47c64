#!/usr/bin/env bash
# Mutation testing of the logic that decides money and correctness (pyproject.toml
# [tool.mutmut]): planning, billing, launcher detection, job-script rendering and quoting,
# the data split, checkpoint retention, the checkpoint's writer and reader. Slow (thousands of
# mutants, hours on 2 cores), so not part of scripts/test.sh. Results are kept in mutants/: a
# rerun checks only mutants of changed functions, but a change of [tool.mutmut] (e.g. its test
# selection) resets every result.
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
    # Fast tests first, the data split's (loader processes, seconds per mutant) last, so that an
    # interrupted run has reported on most areas.
    groups=(
        'scaletrain.clusters.billing*' 'scaletrain.launch.shell_text*'
        'scaletrain.checkpoint.layout*' 'scaletrain.runtime.launchers*'
        'scaletrain.runtime.layout*' 'scaletrain.planning*' 'scaletrain.launch.job_script*'
        'scaletrain.checkpoint.manifest*' 'scaletrain.checkpoint.writer*'
        'scaletrain.checkpoint.resume*' 'scaletrain.checkpoint.dcp_storage*'
        'scaletrain.checkpoint.storage*' 'scaletrain.checkpoint.direct*' 'scaletrain.train.data*'
    )
fi
for group in "${groups[@]}"; do
    echo "== mutmut run $group" >&2
    .venv/bin/mutmut run --max-children "${MUTATION_PROCESSES:-2}" "$group" || true
done
# Survivors on paths that run only with several ranks, against the multi-rank tests
# (scripts/mutation-rank-tests.toml names them); then the report.
echo "== the multi-rank tests against the survivors" >&2
.venv/bin/python scripts/mutation_ranks.py
.venv/bin/python scripts/mutation_report.py
