#!/usr/bin/env bash
# Run the whole test suite (unit, real local Spark + Horovod, real Airflow end to end) in ./.venv.
# Extra arguments go to pytest, e.g. `scripts/test.sh -m "not e2e"`.
set -uo pipefail
cd "$(dirname "$0")/.."
export SPARK_LOCAL_IP=127.0.0.1
.venv/bin/python -m pytest "$@"
rc=$?
if [ "$rc" -eq 5 ]; then
  echo "test: pytest collected no tests; that is a failure here" >&2
  exit 1
fi
exit "$rc"
