#!/usr/bin/env bash
# The main job: run the example retraining DAG (prepare data -> Horovod training on 2 ranks in a Spark
# barrier stage -> evaluation of the model found through XCom) on an embedded local Spark, with Airflow on
# SQLite in ./.airflow. The full log is kept in .airflow/demo.log; the highlights are printed as they happen.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
export AIRFLOW_HOME=${AIRFLOW_HOME:-$ROOT/.airflow}
export AIRFLOW__CORE__DAGS_FOLDER=$ROOT/example_dags
export AIRFLOW__CORE__LOAD_EXAMPLES=False
export SPARK_LOCAL_IP=${SPARK_LOCAL_IP:-127.0.0.1}
export PATH="$ROOT/.venv/bin:$PATH"
mkdir -p "$AIRFLOW_HOME"

echo "demo: Airflow home $AIRFLOW_HOME (SQLite); migrating the database ..."
airflow db migrate > "$AIRFLOW_HOME/migrate.log" 2>&1 || { cat "$AIRFLOW_HOME/migrate.log"; exit 1; }
echo "demo: running DAG horovod_digits_retraining (full log: $AIRFLOW_HOME/demo.log)"
echo
# Highlights only: task boundaries, the Spark application, rank-prefixed training output, the progress line, XCom (artifacts,
# TensorBoard, timeline), accuracy.
airflow dags test horovod_digits_retraining 2>&1 | tee "$AIRFLOW_HOME/demo.log" \
  | grep --line-buffered -E '\[DAG TEST\] (starting|end) task|Spark application .* started|ranks running on|\[rank [0-9]+\]|progress: step|Artifacts pushed|TensorBoard logs|Horovod Timeline|prepared [0-9]+ training|held-out accuracy|HorovodJobError|Task failed with exception' \
  | grep --line-buffered -v 'airflow-provider-horovod: Spark application' \
  | sed -u -E 's/^[0-9T:.Z-]+ \[[a-z ]+\] //; s/ \[(airflow|task)[^]]*\]( loc=[^ ]+)?.*$//; s/ map_index=-1//'
python scripts/show_run.py horovod_digits_retraining
