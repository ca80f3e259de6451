"""The JVM options the hooks give the drivers and executors they start (utils/spark_conf.py)."""

from __future__ import annotations

from airflow_provider_horovod.utils.spark_conf import JVM_STARTUP_OPTIONS, executor_jvm_conf, spark_defaults_keys

KEY = "spark.executor.extraJavaOptions"


def test_executor_options_unless_set_by_the_user_or_the_cluster_defaults():
    assert executor_jvm_conf({}) == {KEY: JVM_STARTUP_OPTIONS}
    assert executor_jvm_conf({KEY: ""}) == {}  # the documented way to turn it off
    assert executor_jvm_conf({KEY: "-Dx=1"}) == {}
    assert executor_jvm_conf({}, {KEY}) == {}  # spark-defaults.conf sets it: a --conf would replace it


def test_spark_defaults_keys_reads_the_conf_dir(tmp_path, monkeypatch):
    (tmp_path / "spark-defaults.conf").write_text(
        "# comment\n\nspark.executor.extraJavaOptions  -Dproxy=on\nspark.eventLog.enabled=true\n"
        "spark.master\tspark://m:7077\n"
    )
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path))
    assert spark_defaults_keys() == {KEY, "spark.eventLog.enabled", "spark.master"}
    monkeypatch.setenv("SPARK_CONF_DIR", str(tmp_path / "none"))
    assert spark_defaults_keys() == set()
    monkeypatch.delenv("SPARK_CONF_DIR")
    monkeypatch.setenv("SPARK_HOME", str(tmp_path.parent))
    (tmp_path.parent / "conf").mkdir(exist_ok=True)
    (tmp_path.parent / "conf" / "spark-defaults.conf").write_text("spark.driver.memory 2g\n")
    assert spark_defaults_keys() == {"spark.driver.memory"}


def test_the_provider_jvms_exit_when_out_of_memory():
    """A JVM out of memory must end (the job fails) rather than live on without the thread that died (issue #22)."""
    assert JVM_STARTUP_OPTIONS.split() == ["-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError"]
    assert executor_jvm_conf({})[KEY].split() == JVM_STARTUP_OPTIONS.split()
