"""Where a standalone master answers, read from a connection (standalone/master.py)."""

from __future__ import annotations

import json


def test_standalone_master_of_a_connection():
    from airflow.models.connection import Connection

    from airflow_provider_horovod.standalone.master import standalone_master

    conn = Connection(
        conn_id="c",
        conn_type="spark",
        host="spark://m1",
        port=7077,
        extra=json.dumps({"spark.airflowProviderHorovod.uiPort": 8090}),
    )
    assert standalone_master(conn) == ("spark://m1:7077", "http://m1:8090")
    ha = Connection(conn_id="c", conn_type="spark", host="spark://m1:7077,m2:7077")
    assert standalone_master(ha) == ("spark://m1:7077,m2:7077", "http://m1:8080")
    assert standalone_master(Connection(conn_id="c", conn_type="spark", host="yarn")) is None
