#!/usr/bin/env bash
# Create .venv with scaletrain (editable) and the pinned development tools.
# Re-running is cheap: nothing is reinstalled unless pyproject.toml or requirements changed.
set -euo pipefail
cd "$(dirname "$0")/.."

venv=.venv
stamp=$venv/.installed
python=${PYTHON:-$(command -v python3.11 || command -v python3 || true)}
if [[ -z "$python" ]]; then
    echo "error: no python3 found. HINT: apt-get install -y python3 python3-venv" >&2
    exit 2
fi
if ! "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))'; then
    echo "error: $python is older than Python 3.10. HINT: install python3.11" >&2
    exit 2
fi

if [[ ! -x $venv/bin/python ]]; then
    if ! "$python" -m venv "$venv" 2>/dev/null; then
        # Debian ships venv separately (python3-venv); install it when we may.
        rm -rf "$venv"
        if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
            echo "installing python3-venv with apt-get" >&2
            apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
            "$python" -m venv "$venv"
        else
            echo "error: '$python -m venv' failed. HINT: sudo apt-get install python3-venv" >&2
            exit 2
        fi
    fi
fi

if [[ ! -f $stamp || pyproject.toml -nt $stamp || requirements/dev.txt -nt $stamp ||
    requirements/deepspeed.txt -nt $stamp ]]; then
    echo "installing scaletrain and its development tools into $venv (first time: a few minutes, ~6 GB)" >&2
    "$venv/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored" || true
    "$venv/bin/python" -m pip install --quiet -r requirements/dev.txt -e . 2>&1 | grep -v "is ignored" || true
    "$venv/bin/python" -m pip install --quiet --no-build-isolation -r requirements/deepspeed.txt 2>&1 |
        grep -v "is ignored" || true
    # Fail here, not later, if the install did.
    "$venv/bin/python" -c 'import scaletrain, torch, torchvision, accelerate, lightning, importlib.util as u
assert u.find_spec("deepspeed"), "deepspeed is not installed"'
    touch "$stamp"
fi
