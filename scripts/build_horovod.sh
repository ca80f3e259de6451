#!/usr/bin/env bash
# Build Horovod from its sdist with Gloo and PyTorch support (no MPI, no TensorFlow/MXNet, CPU collectives) and
# install it into a Python environment that already has PyTorch: what scripts/setup.sh does for ./.venv. It needs
# nothing else from this checkout, so copy it to the machines whose Python runs Spark executors.
#
#   bash build_horovod.sh [--constraints FILE] [PYTHON]
#
#   PYTHON          the interpreter to install into (default: $PYTHON, else python3 on PATH); it must have torch
#   --constraints   a pip constraints file (this checkout's requirements/constraints-user.txt) so that cloudpickle
#                   and the build tools get the tested versions; HOROVOD_VERSION (default 0.28.1) otherwise
#
# Needs g++ and make. About 6 minutes on 2 cores the first time; pip's wheel cache (~/.cache/pip/wheels) makes
# reinstalling the same build instant. Does nothing when that interpreter already imports horovod.torch with Gloo.
set -euo pipefail

die() { echo "build_horovod: $*" >&2; exit 1; }

CONSTRAINTS=()
PY=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case "$1" in
    --constraints) [ $# -ge 2 ] || die "--constraints needs a file"; CONSTRAINTS=(-c "$2"); shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) PY=$1; shift ;;
  esac
done
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}

command -v "$PY" >/dev/null || die "no interpreter $PY"
command -v g++ >/dev/null || die "a C++ compiler (g++) is required to build Horovod; install build-essential"
command -v make >/dev/null || die "make is required to build Horovod; install build-essential"
"$PY" -c 'import torch' 2>/dev/null \
  || die "$PY has no torch: install PyTorch first (Horovod builds its PyTorch extension against it)"
if "$PY" -c 'import horovod.torch; from horovod.common.util import gloo_built; assert gloo_built()' 2>/dev/null; then
  echo "build_horovod: $PY already has Horovod with Gloo: $("$PY" -c 'import horovod; print(horovod.__version__)')"
  exit 0
fi

PIP=("$PY" -m pip --disable-pip-version-check)
BIN=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")
"${PIP[@]}" install -q "${CONSTRAINTS[@]}" "cmake<5" cloudpickle psutil pyyaml packaging wheel
WRAP=$(mktemp -d)
trap 'rm -rf "$WRAP"' EXIT
# Horovod 0.28.1's CMake pins C++14; PyTorch 2.x's headers need C++17: a compiler wrapper appends -std=c++17.
printf '#!/bin/sh\nexec g++ "$@" -std=c++17\n' > "$WRAP/g++17"
chmod +x "$WRAP/g++17"
echo "build_horovod: building Horovod $HOROVOD_VERSION for $PY (Gloo, no MPI; about 6 minutes on 2 cores the first time) ..."
# HOROVOD_GPU_OPERATIONS empty: CPU collectives through Gloo; CMAKE_POLICY_VERSION_MINIMUM: Horovod's old
# CMakeLists with CMake 4; --no-build-isolation: build against the torch installed in that environment.
env CXX="$WRAP/g++17" CMAKE_POLICY_VERSION_MINIMUM=3.5 PATH="$BIN:$PATH" \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
    MAKEFLAGS="-j$(nproc)" \
    "${PIP[@]}" install -q --no-build-isolation "${CONSTRAINTS[@]}" "horovod==$HOROVOD_VERSION"
"$PY" -W ignore::UserWarning - <<'PY'  # torch warns when numpy is not installed (yet)
import horovod, horovod.torch
from horovod.common.util import gloo_built
assert gloo_built(), "Horovod was built without Gloo"
print(f"build_horovod: ok: horovod {horovod.__version__} with Gloo")
PY
