#!/usr/bin/env bash
# Set up everything the project needs on a fresh machine, into ./.venv:
# PyTorch (CPU), Horovod 0.28.1 built from its sdist with Gloo (no MPI; patched so that process sets use
# HOROVOD_GLOO_IFACE, see scripts/build_horovod.sh), Airflow 3.3,
# the Spark provider, PySpark + pyspark-client at the same version, and this package (editable).
# Idempotent: a stamp keyed on the pinned requirements skips work already done.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}

die() { echo "setup: $*" >&2; exit 1; }

# --- requirements of the machine -------------------------------------------------------------
command -v "$PY" >/dev/null || die "python3 not found; Python 3.11 is required"
"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
  || die "Python 3.11 is required (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11"
command -v java >/dev/null || die "Java 17 is required by Spark (java not found on PATH); install openjdk-17-jre-headless"
JAVA_MAJOR=$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1)
[ "${JAVA_MAJOR:-0}" -ge 17 ] || die "Java 17 or newer is required by Spark 4 (found: $(java -version 2>&1 | head -1))"
command -v g++ >/dev/null || die "a C++ compiler (g++) is required to build Horovod; install build-essential"
command -v make >/dev/null || die "make is required to build Horovod; install build-essential"

# pyproject.toml too: its extras and entry points (the UI plugin's) reach .venv only by reinstalling the package
STAMP_KEY=$(cat requirements/*.txt pyproject.toml scripts/setup.sh scripts/build_horovod.sh | sha256sum | cut -c1-16)
STAMP=$VENV/.setup-$STAMP_KEY
if [ -f "$STAMP" ]; then
  echo "setup: environment up to date ($VENV)"
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
$PIP install -q -U "pip>=24" "setuptools<80" wheel
echo "setup: installing PyTorch (CPU) ..."
$PIP install -q -c requirements/pins.txt torch
# The same script users run for their executors' Python (docs/getting-started.md); a no-op once built.
bash scripts/build_horovod.sh --constraints requirements/pins.txt "$VENV/bin/python"
echo "setup: installing Airflow, the Spark provider, PySpark and this package ..."
$PIP install -q -c requirements/pins.txt -e ".[dev]"
# pyspark-client (pulled by the Spark provider) overwrites pyspark's Python files: reinstall the
# matching pyspark last so the JVM jars and the Python half agree (both pinned to one version).
$PIP install -q --force-reinstall --no-deps -c requirements/pins.txt pyspark
# DeepSpeed (a test dependency: tests/integration/test_deepspeed.py) builds from its sdist against the installed
# torch: no isolated build environment, and no C++ ops (its CPU path uses torch's optimizers)
echo "setup: installing DeepSpeed (no C++ ops) ..."
DS_BUILD_OPS=0 $PIP install -q --no-build-isolation -c requirements/pins.txt deepspeed
# On CPU, DeepSpeed compiles its shared-memory collectives the first time a process group starts (30-65 s on 2
# cores; cached under ~/.cache/torch_extensions): built here, so no test pays it
"$VENV/bin/python" -c "from deepspeed.comm.torch import build_shm_op; build_shm_op()" >/dev/null 2>&1 \
  || die "DeepSpeed could not build its CPU collectives (deepspeed.comm.torch.build_shm_op): g++, ninja and the Python headers are needed"
"$VENV/bin/python" - <<'PY'
import airflow, deepspeed, horovod, horovod.torch, lightning, pyspark, torch, transformers
from horovod.common.util import gloo_built
assert gloo_built(), "Horovod was built without Gloo"
print(f"setup: ok: torch {torch.__version__}, horovod {horovod.__version__}, pyspark {pyspark.__version__}, "
      f"airflow {airflow.__version__}")
PY
rm -f "$VENV"/.setup-*
touch "$STAMP"
