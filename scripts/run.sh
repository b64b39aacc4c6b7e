#!/usr/bin/env bash
# The two commands of the README, each doing its own set-up on a fresh machine:
#   bash scripts/run.sh demo   train every installed method on generated benchmarks, print the comparison
#   bash scripts/run.sh test   the test suite
# Both create .venv (Python 3.11) and install hfncl with the CPU build of torch on first use.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${HFNCL_VENV:-.venv}"
python_bin="$(command -v python3.11 || command -v python3)"
if [ ! -x "$venv/bin/python" ]; then
    "$python_bin" -m venv "$venv"
fi
stamp="$venv/.hfncl-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    # The pinned CPU build; an unpinned torch would pull several GB of CUDA packages.
    "$venv/bin/python" -m pip install --quiet "torch==2.13.0"
    "$venv/bin/python" -m pip install --quiet -e ".[dev]"
    touch "$stamp"
fi
command="${1:-}"
shift || true
case "$command" in
    demo) exec "$venv/bin/hfncl" demo "$@" ;;
    test) exec "$venv/bin/python" -m pytest "$@" ;;
    *) echo "usage: bash scripts/run.sh demo|test [args...]" >&2; exit 2 ;;
esac
