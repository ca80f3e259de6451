#!/usr/bin/env bash
# The toolchain `make test` runs before the suite (configured in pyproject.toml, pinned in requirements/pins.txt):
# ruff's lint rules, ruff's formatter as a check (run `.venv/bin/ruff format .` to apply it) and mypy over the package.
# Any finding fails the step, and with it `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-$PWD/.venv}
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/mypy"
