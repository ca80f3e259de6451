#!/usr/bin/env bash
# `make test`: every set-up step and the toolchain's checks (scripts/lint.sh), then the whole test suite, each
# set-up step timed into the suite's time table (tests/time_table.py prints it at the end, slowest first, with each
# test module's time).
# Extra arguments go to pytest (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .test-times
export APH_SETUP_TIMES=$PWD/.test-times/setup.tsv APH_TIME_TABLE=$PWD/.test-times/table.tsv
: > "$APH_SETUP_TIMES"

step() {  # step NAME COMMAND...: run it, append "<seconds>\t<name>" to the set-up times
  local name=$1 started=$SECONDS
  shift
  "$@"
  printf '%s\t%s\n' "$((SECONDS - started))" "$name" >> "$APH_SETUP_TIMES"
}

step "scripts/setup.sh (./.venv)" bash scripts/setup.sh
step "scripts/lint.sh (ruff check, ruff format --check, mypy)" bash scripts/lint.sh
step "scripts/setup_keras.sh (./.venv-keras)" bash scripts/setup_keras.sh
step "scripts/setup_browser.sh (chromium, chromedriver)" bash scripts/setup_browser.sh
step "scripts/setup_mlflow_server.sh (./.venv-mlflow-server)" bash scripts/setup_mlflow_server.sh
exec bash scripts/test.sh "$@"
