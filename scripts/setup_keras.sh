#!/usr/bin/env bash
# Set up ./.venv-keras: the Python that runs Keras/TensorFlow training functions (the ranks on Spark executors, and
# the driver for np < 0), beside ./.venv, which runs Airflow (scripts/setup.sh). TensorFlow 2.15.1 (tf.keras is
# Keras 2, what horovod.keras expects) with numpy < 2 and protobuf < 5, PySpark 4.2.0, and Horovod 0.28.1 built
# with TensorFlow and Gloo by scripts/build_horovod.sh (patched as for PyTorch). Pins: requirements/keras-pins.txt.
# A job uses it through conf={"spark.pyspark.python": ..., "spark.pyspark.driver.python": ...} (docs/keras.md).
# Idempotent: a stamp keyed on the pins, the scripts and the interpreter skips work already done; the Horovod wheel is
# cached, and the virtualenv is kept between clones (scripts/kept_venv.sh; KERAS_VENV=path makes it there instead).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PYTHON:-python3}

die() { echo "setup_keras: $*" >&2; exit 1; }

"$PY" -c 'import sys; sys.exit(0 if sys.version_info[:2] == (3, 11) else 1)' \
  || die "Python 3.11 is required, the same as ./.venv's (the payload travels between them); set PYTHON=..."
STAMP_KEY=$( (cat requirements/keras-pins.txt scripts/setup_keras.sh scripts/build_horovod.sh; "$PY" --version) \
  | sha256sum | cut -c1-16)
if [ -n "${KERAS_VENV:-}" ]; then
  VENV=$KERAS_VENV
else
  . scripts/kept_venv.sh
  VENV=$(kept_venv_link keras "$STAMP_KEY" "$ROOT/.venv-keras")
fi
STAMP=$VENV/.setup-$STAMP_KEY
if [ -f "$STAMP" ]; then
  echo "setup_keras: environment up to date ($VENV)"
  exit 0
fi

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip --disable-pip-version-check"
$PIP install -q -U "pip>=24" "setuptools<80" wheel
echo "setup_keras: installing TensorFlow 2.15 (CPU), PySpark and the runtime's dependencies ..."
$PIP install -q -c requirements/keras-pins.txt tensorflow-cpu numpy protobuf pyspark py4j cloudpickle psutil
TF_CPP_MIN_LOG_LEVEL=2 bash scripts/build_horovod.sh --framework tensorflow --constraints requirements/keras-pins.txt "$VENV/bin/python"
TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/python" - <<'PY'
import horovod, horovod.tensorflow.keras, keras, pyspark, tensorflow as tf
from horovod.common.util import gloo_built
assert gloo_built(), "Horovod was built without Gloo"
assert keras.__version__.startswith("2."), f"tf.keras is Keras {keras.__version__}; horovod.keras needs Keras 2"
print(f"setup_keras: ok: tensorflow {tf.__version__} (Keras {keras.__version__}), horovod {horovod.__version__}, "
      f"pyspark {pyspark.__version__}")
PY
rm -f "$VENV"/.setup-*
touch "$STAMP"
