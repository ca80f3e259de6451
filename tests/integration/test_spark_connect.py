"""The barrier job over Spark Connect: a real Connect server on 127.0.0.1, no JVM in the caller."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime import HorovodRunner, RankFailedError
from tests.connect_server import connect_server

pytestmark = [pytest.mark.spark, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    with connect_server(tmp_path_factory.mktemp("connect")) as url:
        yield url


@pytest.fixture
def remote_session(connect_url):
    from pyspark.sql import SparkSession

    session = SparkSession.builder.remote(connect_url).getOrCreate()
    yield session
    session.stop()


def allreduce(value):
    import horovod.torch as hvd
    import torch

    hvd.init()
    total = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
    print(f"connect rank {hvd.rank()} total {total.item()}", flush=True)
    return {"rank": hvd.rank(), "size": hvd.size(), "total": total.item(), "value": value, "blob": "x" * 3_000_000}


def fail_on_rank_one():
    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        raise ValueError("bad shard over Connect")
    hvd.allreduce(torch.ones(1))


def test_np2_over_spark_connect(remote_session, capfd):
    from airflow_provider_horovod.runtime.connect import is_connect_session

    assert is_connect_session(remote_session)
    result = HorovodRunner(np=2, spark=remote_session).run(allreduce, value="c")
    assert {k: result[k] for k in ("rank", "size", "total", "value")} == {"rank": 0, "size": 2, "total": 3.0,
                                                                          "value": "c"}
    assert len(result["blob"]) == 3_000_000  # travelled in several rows, reassembled
    assert "[rank 0] connect rank 0 total 3.0" in capfd.readouterr().out  # output came back over the channel


def test_failing_rank_over_spark_connect(remote_session):
    with pytest.raises(RankFailedError) as info:
        HorovodRunner(np=2, spark=remote_session).run(fail_on_rank_one)
    assert info.value.rank == 1 and "bad shard over Connect" in str(info.value)


def test_operator_with_a_spark_connect_connection(connect_url, airflow_home, tmp_path):
    """Real Airflow: a ``spark_connect`` connection runs the job through Connect from the task process."""
    import json
    import os
    import shutil
    from urllib.parse import urlparse

    from tests.e2e.test_dags import HERE, run_dag

    dags = tmp_path / "dags"
    dags.mkdir()
    shutil.copy(HERE / "dags" / "horovod_connect.py", dags)
    url = urlparse(connect_url.replace("sc://", "http://"))
    env = {"AIRFLOW_CONN_SPARK_CONNECT_TEST": json.dumps({"conn_type": "spark_connect", "host": url.hostname,
                                                          "port": url.port})}
    log, run = run_dag(airflow_home, dags, "horovod_connect", extra_env=env)
    assert run["states"] == {"train": "success"}, log[-5000:]
    assert run["xcom"]["train.return_value"] == {"size": 2, "total": 3.0}
    paths = run["xcom"]["train.artifact_paths"]
    assert [os.path.basename(p) for p in paths] == ["model.pt"] and os.path.isfile(paths[0])
    assert "Spark Connect session to sc://127.0.0.1" in log
    assert "[rank 0] connect training on rank 0" in log
    assert "Spark-Submit cmd" not in log  # no spark-submit JVM was started for this task
