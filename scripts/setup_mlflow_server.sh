#!/usr/bin/env bash
# Set up ./.venv-mlflow-server: the MLflow tracking server the MLflow tests start on 127.0.0.1 (tests/mlflow_server.py),
# beside ./.venv, which has the client (mlflow-skinny, the package's mlflow extra). The server is the full mlflow
# package, whose pins (Flask, SQLAlchemy, alembic, ...) are its own, so it lives in its own virtualenv.
# Pin: requirements/mlflow-server.txt. Idempotent: a stamp keyed on the pin, this script and the interpreter skips work
# already done; the virtualenv is kept between clones (scripts/kept_venv.sh; MLFLOW_SERVER_VENV=path makes it there).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}

STAMP_KEY=$( (cat requirements/mlflow-server.txt scripts/setup_mlflow_server.sh; "$PY" --version) | sha256sum | cut -c1-16)
if [ -n "${MLFLOW_SERVER_VENV:-}" ]; then
  VENV=$MLFLOW_SERVER_VENV
else
  . scripts/kept_venv.sh
  VENV=$(kept_venv_link mlflow-server "$STAMP_KEY" "$ROOT/.venv-mlflow-server")
fi
STAMP=$VENV/.setup-$STAMP_KEY
if [ -f "$STAMP" ]; then
  echo "setup_mlflow_server: environment up to date ($VENV)"
  exit 0
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
$PIP install -q -U "pip>=24"
echo "setup_mlflow_server: installing the MLflow server ..."
$PIP install -q -r requirements/mlflow-server.txt
"$VENV/bin/mlflow" --version
rm -f "$VENV"/.setup-*
touch "$STAMP"
