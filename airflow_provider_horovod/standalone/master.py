"""
Where a Spark standalone master answers, read from a Spark provider ``spark`` connection: its ``spark://`` URL, its
REST submission server and its web UI. Client deploy mode reads the master URL as ``SparkSubmitHook`` builds it
(:func:`standalone_master`); cluster deploy mode reads all three (:class:`StandaloneEndpoints`,
:attr:`~airflow_provider_horovod.standalone.hook.HorovodStandaloneHook.endpoints`), and follows a driver on a
:class:`DriverRoute`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.utils.spark_conf import check_reachable, master_addresses
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
        return cls(
            master_url=f"spark://{host}:{conn.port or 7077}",
            rest_url=f"{extra.rest_scheme}://{host}:{extra.rest_port}",
            master_ui_url=f"{extra.ui_scheme}://{host}:{extra.ui_port}",
        )


@dataclass(frozen=True)
class DriverRoute:
    """
    Where a submitted driver's state is read and its kill is sent: the master's REST submission server, or, for a
    driver submitted through spark-submit's legacy gateway (a master with Spark RPC authentication runs no REST
    server), the master web UI's ``/json/`` and kill link. A deferral trigger persists it as its ``rest_url`` and
    ``master_ui_url``.

    :param rest_url: the REST submission server, e.g. ``http://master:6066``.
    :param master_ui_url: the master's web UI, for a driver submitted through the gateway; ``None``: the REST server.
    """

    rest_url: str
    master_ui_url: str | None = None


def check_master_reachable(endpoints: StandaloneEndpoints, *, conn_id: str | None, gateway: bool) -> None:
    """
    Fail at once, naming the address, when the master or its REST submission server does not accept a TCP
    connection (the driver would otherwise fail on a worker, or the submission after the REST retries).

    :param endpoints: the master's endpoints.
    :param conn_id: the connection they come from, for the hint.
    :param gateway: the driver goes through spark-submit's gateway (a master with Spark RPC authentication, which
        runs no REST server): only the master is checked.
    :raises HorovodJobError: ``cannot reach Spark master spark://host:port (...)`` or ``cannot reach the
        Spark master's REST submission server http://host:port (...)``.
    """
    e = endpoints
    hint = f"Check the host and port of the Airflow connection {conn_id!r} and that the master is running"
    check_reachable(e.master_url, master_addresses(e.master_url), hint=hint)
    if gateway:  # spark-submit's gateway talks to the master itself, which runs no REST server
        return
    rest = urlparse(e.rest_url)
    check_reachable(
        e.rest_url,
        [(rest.hostname or "", rest.port or 6066)],
        what="the Spark master's REST submission server",
        hint=f"{hint}, with spark.master.rest.enabled=true (the default from Spark 4.1) and its "
        "spark.master.rest.port in the connection's spark.airflowProviderHorovod.restPort extra "
        "(default 6066); a master with Spark RPC authentication runs none: give the connection "
        "the spark.authenticate.secret extra to submit through spark-submit's gateway",
    )


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
