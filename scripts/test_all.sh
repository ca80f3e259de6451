#!/usr/bin/env bash
# `make test`: every set-up step and the toolchain's checks (scripts/lint.sh), then the whole test suite, each
# set-up step timed into the suite's time table (tests/time_table.py prints it at the end, slowest first, with each
# test module's time).
# The steps that make virtualenvs of their own (./.venv-keras, ./.venv-mlflow-server, the install checks' kept ones)
# run in the background beside ./.venv's set-up, lint and the browser: on a fresh machine their downloads and builds
# overlap instead of queueing (the table marks them "in the background"; its set-up total is the wall time).
# Extra arguments go to pytest (scripts/test.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p .test-times
export APH_SETUP_TIMES=$PWD/.test-times/setup.tsv APH_TIME_TABLE=$PWD/.test-times/table.tsv
: > "$APH_SETUP_TIMES"
SETUP_STARTED=$SECONDS

step() {  # step NAME COMMAND...: run it, append "<seconds>\t<name>" to the set-up times
  local name=$1 started=$SECONDS
  shift
  "$@"
  printf '%s\t%s\n' "$((SECONDS - started))" "$name" >> "$APH_SETUP_TIMES"
}

BACKGROUND=()  # "pid<TAB>log<TAB>name" of each background step
background() {  # background NAME COMMAND...: run step NAME in the background, its output to .test-times/<n>.log
  local log
  log=$PWD/.test-times/background-${#BACKGROUND[@]}.log
  step "$1 (in the background)" "${@:2}" > "$log" 2>&1 &
  BACKGROUND+=("$!"$'\t'"$log"$'\t'"$1")
  echo "test_all: $1: started in the background (output: $log)"
}

finish_background() {  # wait for every background step; print each one's output; fail if any failed
  local entry pid log name failed=0
  for entry in "${BACKGROUND[@]}"; do
    IFS=$'\t' read -r pid log name <<< "$entry"
    if wait "$pid"; then
      echo "test_all: $name: done"; cat "$log"
    else
      failed=1; echo "test_all: $name FAILED:" >&2; cat "$log" >&2
    fi
  done
  return "$failed"
}

trap 'kill $(jobs -p) 2>/dev/null || true' EXIT  # a failed step stops the background ones too
background "scripts/setup_keras.sh (./.venv-keras)" bash scripts/setup_keras.sh
background "scripts/setup_mlflow_server.sh (./.venv-mlflow-server)" bash scripts/setup_mlflow_server.sh
step "scripts/setup.sh (./.venv)" bash scripts/setup.sh
background "tests/install_venvs.py (the install checks' virtualenvs)" .venv/bin/python -m tests.install_venvs
step "scripts/lint.sh (ruff check, ruff format --check, mypy)" bash scripts/lint.sh
step "scripts/setup_browser.sh (chromium, chromedriver)" bash scripts/setup_browser.sh
finish_background
printf '%s\t%s\n' "$((SECONDS - SETUP_STARTED))" "=wall" >> "$APH_SETUP_TIMES"
trap - EXIT
exec bash scripts/test.sh "$@"
