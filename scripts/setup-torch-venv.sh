#!/usr/bin/env bash
# Create .venv-torch-VERSION: scaletrain (editable) with torch VERSION and the tools of the fast
# test tiers, for the oldest and the newest release the package declares (scripts/test.sh).
# Re-running is cheap: nothing is reinstalled unless the requirements or pyproject.toml changed.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: bash scripts/setup-torch-venv.sh TORCH_VERSION}
venv=.venv-torch-$version
stamp=$venv/.installed
python=${PYTHON:-$(command -v python3.11 || command -v python3)}
[[ -x $venv/bin/python ]] || "$python" -m venv "$venv"
if [[ ! -f $stamp || pyproject.toml -nt $stamp || requirements/torch-matrix.txt -nt $stamp ||
    requirements/deepspeed.txt -nt $stamp ]]; then
    echo "installing torch $version and the test tools into $venv (first time: ~5 GB, minutes)" >&2
    # Other releases than the pinned one come from PyPI: no machine-wide constraint applies.
    export PIP_CONSTRAINT=/dev/null
    "$venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
    "$venv/bin/python" -m pip install --quiet "torch==$version" -r requirements/torch-matrix.txt \
        -e . 2>&1 | grep -v "is ignored" || true
    "$venv/bin/python" -m pip install --quiet --no-build-isolation -r requirements/deepspeed.txt \
        2>&1 | grep -v "is ignored" || true
    "$venv/bin/python" -c "import importlib.util as u, scaletrain, torch
assert torch.__version__.startswith('$version'), torch.__version__
assert u.find_spec('deepspeed'), 'deepspeed is not installed'"
    touch "$stamp"
fi
