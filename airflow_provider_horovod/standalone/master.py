"""
Where a Spark standalone master answers, read from a Spark provider ``spark`` connection: its ``spark://`` URL, its
REST submission server and its web UI. Client deploy mode reads the master URL as ``SparkSubmitHook`` builds it
(:func:`standalone_master`); cluster deploy mode reads all three (:class:`StandaloneEndpoints`,
:attr:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook.endpoints`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.utils.spark_connection import connection_extras


@dataclass(frozen=True)
class StandaloneEndpoints:
    """Where a standalone master answers: ``spark://`` URL, REST submission server, web UI."""

    master_url: str
    rest_url: str
    master_ui_url: str

    @classmethod
    def of(cls, conn: Any) -> StandaloneEndpoints:
        """
        The endpoints of a connection to a standalone master: its host (``spark://`` optional) and port (default
        7077); the REST server and web UI on that host at the ``spark.airflowProviderHorovod.restPort`` / ``.uiPort``
        extras and their schemes (:func:`~airflow_provider_horovod.utils.spark_connection.connection_extras`).

        :param conn: the Airflow connection.
        :raises HorovodJobError: the connection has no host.
        """
        host = (conn.host or "").removeprefix("spark://").strip("/")
        if not host:
            raise HorovodJobError(f"conn_id={conn.conn_id!r}: cluster deploy mode needs a spark://host:port master")
        extra = connection_extras(conn)
        return cls(master_url=f"spark://{host}:{conn.port or 7077}",
                   rest_url=f"{extra.rest_scheme}://{host}:{extra.rest_port}",
                   master_ui_url=f"{extra.ui_scheme}://{host}:{extra.ui_port}")


def standalone_master(conn: Any) -> tuple[str, str] | None:
    """
    ``(master URL, master web UI URL)`` of a Spark provider ``spark`` connection to a standalone master.

    The master is what ``SparkSubmitHook`` builds (``host`` with its ``spark://`` scheme, ``:port`` when set);
    the web UI is on the first master host at the ``spark.airflowProviderHorovod.uiPort`` extra (default 8080, scheme
    ``spark.airflowProviderHorovod.uiScheme``; read by
    :func:`~airflow_provider_horovod.utils.spark_connection.connection_extras`).

    :param conn: the Airflow connection.
    :return: the two URLs, or ``None`` when the connection is not a ``spark://`` master.
    """
    host = (conn.host or "").strip().rstrip("/")
    if not host.startswith("spark://"):
        return None
    master = f"{host}:{conn.port}" if conn.port else host
    first = master.removeprefix("spark://").split(",")[0].rsplit(":", 1)[0]
    extra = connection_extras(conn)
    return master, f"{extra.ui_scheme}://{first}:{extra.ui_port}"
