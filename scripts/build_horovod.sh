#!/usr/bin/env bash
# Build Horovod from its sdist with Gloo and PyTorch (or TensorFlow) support (no MPI, no MXNet, CPU collectives) and
# install it into a Python environment that already has that framework: what scripts/setup.sh does for ./.venv. It needs
# nothing else from this checkout, so copy it to the machines whose Python runs Spark executors.
#
#   bash build_horovod.sh [--constraints FILE] [--framework F] [--wheel-dir DIR | --source-dir DIR] [PYTHON]
#
#   PYTHON          the interpreter to install into (default: $PYTHON, else python3 on PATH); it must have the
#                   framework installed
#   --framework     pytorch (default: horovod.torch) or tensorflow (horovod.tensorflow and horovod.keras, for
#                   Keras; requirements/keras-pins.txt has the tested TensorFlow 2.15 set, scripts/setup_keras.sh)
#   --constraints   a pip constraints file (this checkout's requirements/constraints-user.txt) so that cloudpickle
#                   and the build tools get the tested versions; HOROVOD_VERSION (default 0.28.1) otherwise
#   --wheel-dir     build the wheel into DIR instead of installing it (for machines with the same Python and framework)
#   --source-dir    only download, unpack and patch the sdist into DIR/horovod-VERSION (no build, no framework needed)
#   HOROVOD_SDIST   a horovod-VERSION.tar.gz to use instead of downloading it (machines without a package index)
#
# The sdist is patched before the build (one line, PATCH below): Horovod 0.28.1 creates its process sets' Gloo
# devices (the global one included) without HOROVOD_GLOO_IFACE, so they bind to the address of the host name, which
# other hosts may not reach. The build is labelled 0.28.1+gloo.iface (`pip show horovod`), which the launcher reads
# to skip its host-name check; an unlabelled Horovod here is rebuilt.
# Needs g++, make and patch. About 6 minutes on 2 cores the first time; the wheel is kept in
# ~/.cache/build_horovod (HOROVOD_WHEEL_CACHE), per Python, framework version and patch, so reinstalling is instant.
# Does nothing when that interpreter already imports horovod.torch (horovod.tensorflow.keras) with Gloo from a
# patched build.
set -euo pipefail

die() { echo "build_horovod: $*" >&2; exit 1; }

CONSTRAINTS=()
PY=${PYTHON:-python3}
WHEEL_DIR=
SOURCE_DIR=
FRAMEWORK=pytorch
while [ $# -gt 0 ]; do
  case "$1" in
    --constraints) [ $# -ge 2 ] || die "--constraints needs a file"; CONSTRAINTS=(-c "$2"); shift 2 ;;
    --wheel-dir) [ $# -ge 2 ] || die "--wheel-dir needs a directory"; WHEEL_DIR=$2; shift 2 ;;
    --source-dir) [ $# -ge 2 ] || die "--source-dir needs a directory"; SOURCE_DIR=$2; shift 2 ;;
    --framework) [ $# -ge 2 ] || die "--framework needs pytorch or tensorflow"; FRAMEWORK=$2; shift 2 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) PY=$1; shift ;;
  esac
done
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
case "$FRAMEWORK" in  # the framework's module, Horovod's module for it, its build switches
  pytorch) FW_MODULE=torch; HVD_MODULE=horovod.torch
           FW_FLAGS=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1) ;;
  tensorflow) FW_MODULE=tensorflow; HVD_MODULE=horovod.tensorflow.keras
              FW_FLAGS=(HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITHOUT_PYTORCH=1) ;;
  *) die "--framework must be pytorch or tensorflow, got '$FRAMEWORK'" ;;
esac
LABEL=gloo.iface  # the local version label of a patched build: 0.28.1+gloo.iface

command -v "$PY" >/dev/null || die "no interpreter $PY"
command -v patch >/dev/null || die "patch is required to patch Horovod's sdist; install patch (or build-essential)"
PIP=("$PY" -m pip --disable-pip-version-check)

# Process sets take the interface the global context was initialised with (from HOROVOD_GLOO_IFACE).
PATCH=$(cat <<'EOF'
--- a/horovod/common/gloo/gloo_context.cc
+++ b/horovod/common/gloo/gloo_context.cc
@@ -279,7 +279,7 @@ void GlooContext::InitializeForProcessSe
   }
 
   attr device_attr;
-  device_attr.iface = gloo_iface_;
+  device_attr.iface = global_context.gloo_iface_;
   device_attr.ai_family = AF_UNSPEC;
   auto dev = CreateDevice(device_attr);
 
EOF
)

# Download, unpack and patch the sdist into $1; prints the source directory.
patched_source() {
  local dest=$1 src
  mkdir -p "$dest"
  if [ -n "${HOROVOD_SDIST:-}" ]; then
    tar -xzf "$HOROVOD_SDIST" -C "$dest" || die "cannot unpack HOROVOD_SDIST=$HOROVOD_SDIST"
  else
    # pip reads the sdist's metadata while downloading it: in this interpreter when it has setuptools and wheel
    # (no second download), else in an isolated build environment (a bare system Python for --source-dir).
    local isolation=(--no-build-isolation)
    "$PY" -c 'import setuptools, wheel' 2>/dev/null || isolation=()
    "${PIP[@]}" download -q --no-deps --no-binary :all: "${isolation[@]}" "${CONSTRAINTS[@]}" \
        -d "$dest" "horovod==$HOROVOD_VERSION" >&2 \
      || { echo "build_horovod: cannot download the horovod==$HOROVOD_VERSION sdist; set HOROVOD_SDIST" >&2; exit 2; }
    tar -xzf "$dest/horovod-$HOROVOD_VERSION.tar.gz" -C "$dest"
  fi
  src=$dest/horovod-$HOROVOD_VERSION
  printf '%s\n' "$PATCH" | patch -p1 --forward --quiet -d "$src" >&2 \
    || die "the Gloo patch fails on Horovod $HOROVOD_VERSION"
  [ "$(grep -c 'device_attr.iface = global_context.gloo_iface_;' "$src/horovod/common/gloo/gloo_context.cc")" = 1 ] \
    || die "the Gloo interface patch did not change InitializeForProcessSet"
  echo "$src"
}

if [ -n "$SOURCE_DIR" ]; then
  SRC=$(patched_source "$SOURCE_DIR")
  echo "build_horovod: patched source in $SRC"
  exit 0
fi

command -v g++ >/dev/null || die "a C++ compiler (g++) is required to build Horovod; install build-essential"
command -v make >/dev/null || die "make is required to build Horovod; install build-essential"
"$PY" -c "import $FW_MODULE" 2>/dev/null \
  || die "$PY has no $FW_MODULE: install $FRAMEWORK first (Horovod builds its $FRAMEWORK extension against it)"
# exit 0: a patched build with Gloo; 3: Horovod with Gloo, but not patched; 1: no usable Horovod
CHECK="import $HVD_MODULE, importlib.metadata as m; from horovod.common.util import gloo_built
assert gloo_built(); exit(0 if m.version('horovod').endswith('+$LABEL') else 3)"
if [ -z "$WHEEL_DIR" ]; then
  rc=0; "$PY" -W ignore -c "$CHECK" 2>/dev/null || rc=$?
  if [ "$rc" = 0 ]; then
    echo "build_horovod: $PY already has patched Horovod with Gloo: $("$PY" -m pip show horovod | grep ^Version)"
    exit 0
  fi
  [ "$rc" = 3 ] && echo "build_horovod: $PY has Horovod without the Gloo interface patch: replacing it"
fi

# The wheel is built once per Python, framework version and patch, and kept (pip never caches a wheel built from a
# local directory): reinstalling into a fresh environment is then instant.
CACHE=${HOROVOD_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/build_horovod}
KEY=$("$PY" -c "import sys, $FW_MODULE as fw; print(f'py{sys.version_info[0]}{sys.version_info[1]}-$FW_MODULE{fw.__version__}')")
OUT=${WHEEL_DIR:-$CACHE/$HOROVOD_VERSION-$KEY-$(printf '%s' "$PATCH" | sha256sum | cut -c1-12)}
wheel() { ls "$OUT"/horovod-"$HOROVOD_VERSION"+"$LABEL"-*.whl 2>/dev/null | head -1; }
if [ -n "$(wheel)" ]; then
  echo "build_horovod: using the wheel built before: $(wheel)"
else
  BIN=$(dirname "$("$PY" -c 'import sys; print(sys.executable)')")
  "${PIP[@]}" install -q "${CONSTRAINTS[@]}" "cmake<5" cloudpickle psutil pyyaml packaging wheel
  WORK=$(mktemp -d)
  trap 'rm -rf "$WORK"' EXIT
  SRC=$(patched_source "$WORK/sdist")
  # Horovod 0.28.1's CMake pins C++14; PyTorch 2.x's headers need C++17: a compiler wrapper appends -std=c++17.
  printf '#!/bin/sh\nexec g++ "$@" -std=c++17\n' > "$WORK/g++17"
  chmod +x "$WORK/g++17"
  echo "build_horovod: building Horovod $HOROVOD_VERSION+$LABEL with $FRAMEWORK for $PY (Gloo, no MPI; about 6 minutes on 2 cores with pytorch, 2 with tensorflow) ..."
  # HOROVOD_GPU_OPERATIONS empty: CPU collectives through Gloo; CMAKE_POLICY_VERSION_MINIMUM: Horovod's old
  # CMakeLists with CMake 4; --no-build-isolation: build against the framework installed in that environment. Built from
  # the patched directory, so pip's wheel cache (which may hold an unpatched 0.28.1) is never used.
  mkdir -p "$OUT"
  env CXX="$WORK/g++17" CMAKE_POLICY_VERSION_MINIMUM=3.5 PATH="$BIN:$PATH" HOROVOD_LOCAL_VERSION=$LABEL \
      "${FW_FLAGS[@]}" HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_GPU_OPERATIONS= \
      MAKEFLAGS="-j$(nproc)" \
      "${PIP[@]}" wheel -q --no-deps --no-build-isolation -w "$OUT" "$SRC"
  [ -n "$(wheel)" ] || die "pip built no horovod-$HOROVOD_VERSION+$LABEL wheel in $OUT"
fi
if [ -n "$WHEEL_DIR" ]; then
  echo "build_horovod: ok: $(wheel)"
  exit 0
fi
"${PIP[@]}" install -q "${CONSTRAINTS[@]}" "$(wheel)"
"$PY" -W ignore -c "$CHECK" || die "the installed Horovod is not the patched build with Gloo"
echo "build_horovod: ok: horovod $("$PY" -m pip show horovod | sed -n 's/^Version: //p') with Gloo"
