"""
``HorovodRunnerOperator``'s deploy modes, one strategy object each, chosen once per try (:func:`resolve_deploy_mode`
names it; the operator makes it with its request, hook and reporter):

- :class:`ClientMode`: spark-submit in client mode; the Spark driver runs in the task.
- :class:`ClusterMode`: a Spark standalone cluster-mode driver, submitted over REST; it can defer and reattach.
- :class:`ConnectMode`: the barrier job over a Spark Connect session.
"""

from __future__ import annotations

from airflow_provider_horovod._compat import AirflowNotFoundException
from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.operators.common import validate_deploy_mode
from airflow_provider_horovod.utils.spark_connection import connection_extras

__all__ = ["resolve_deploy_mode"]


def resolve_deploy_mode(*, conn_id: str | None, deploy_mode: str | None, np: int) -> str:
    """
    Which deploy mode a try runs in: ``connect`` for a Spark provider ``spark_connect`` connection, else
    ``deploy_mode``, else the connection's ``spark.airflowProviderHorovod.deployMode`` extra, else its (the Spark
    provider's) ``deploy-mode`` extra, else ``client``.

    :param conn_id: the operator's connection id (``None``: the embedded local master).
    :param deploy_mode: the operator's ``deploy_mode`` argument.
    :param np: the number of Horovod processes.
    :return: ``"client"``, ``"cluster"`` or ``"connect"``.
    :raises HorovodJobError: ``np < 0`` over Spark Connect (there is no driver machine to run ranks on).
    :raises ValueError: the connection's ``deploy-mode`` extra is not ``client`` or ``cluster``.
    """
    if conn_id is None:
        return deploy_mode or "client"
    try:
        conn = HorovodHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return deploy_mode or "client"  # HorovodHook explains a missing non-default connection
    if conn.conn_type == "spark_connect":
        if np < 0:
            raise HorovodJobError(f"np={np}: over Spark Connect (connection {conn_id!r}) there is no driver machine "
                                  "to run ranks on; use np > 0 (barrier tasks)")
        return "connect"
    if deploy_mode is not None:
        return deploy_mode
    mode = connection_extras(conn).deploy_mode or conn.extra_dejson.get("deploy-mode") or "client"
    return validate_deploy_mode(mode, source=f"connection {conn_id!r}")

