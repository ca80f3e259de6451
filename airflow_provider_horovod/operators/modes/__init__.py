"""
``HorovodRunnerOperator``'s deploy modes, one strategy object each, chosen once per try (:func:`resolve_deploy_mode`
names it; the operator makes it with its request, hook and reporter):

- :class:`ClientMode`: spark-submit in client mode; the Spark driver runs in the task.
- :class:`ClusterMode`: a Spark standalone cluster-mode driver, submitted over REST; it can defer and reattach.
- :class:`ConnectMode`: the barrier job over a Spark Connect session.

Cluster deploy mode is chosen by the deploy mode and the master URL together (:func:`cluster_manager`), the way the
Spark provider picks a submit backend per cluster manager: the standalone master is the one with a cluster mode
here, its pieces in :mod:`airflow_provider_horovod.standalone`.
"""

from __future__ import annotations

import re

from airflow_provider_horovod._compat import AirflowNotFoundException
from airflow_provider_horovod.exceptions import HorovodJobError
from airflow_provider_horovod.hooks.horovod import HorovodHook
from airflow_provider_horovod.operators.common import validate_deploy_mode
from airflow_provider_horovod.utils.spark_connection import connection_extras

__all__ = ["cluster_manager", "resolve_deploy_mode"]

OTHER_MASTERS = (
    (re.compile(r"yarn$"), "YARN"),
    (re.compile(r"k8s://"), "Kubernetes"),
    (re.compile(r"mesos://"), "Mesos"),
    (re.compile(r"local(-cluster)?(\[.*\])?$"), "a local master"),
)
"""Master URLs of Spark's other cluster managers, as ``spark-submit --master`` takes them, and their names."""


def resolve_deploy_mode(*, conn_id: str | None, deploy_mode: str | None, np: int) -> str:
    """
    Which deploy mode a try runs in: ``connect`` for a Spark provider ``spark_connect`` connection, else
    ``deploy_mode``, else the connection's ``spark.airflowProviderHorovod.deployMode`` extra, else its (the Spark
    provider's) ``deploy-mode`` extra, else ``client``.

    :param conn_id: the operator's connection id (``None``: the embedded local master).
    :param deploy_mode: the operator's ``deploy_mode`` argument.
    :param np: the number of Horovod processes.
    :return: ``"client"``, ``"cluster"`` (on a standalone master: :func:`cluster_manager`) or ``"connect"``.
    :raises HorovodJobError: ``np < 0`` over Spark Connect (there is no driver machine to run ranks on), or cluster
        deploy mode on a master of another cluster manager.
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
            raise HorovodJobError(
                f"np={np}: over Spark Connect (connection {conn_id!r}) there is no driver machine "
                "to run ranks on; use np > 0 (barrier tasks)"
            )
        return "connect"
    if deploy_mode is None:
        mode = connection_extras(conn).deploy_mode or conn.extra_dejson.get("deploy-mode") or "client"
        deploy_mode = validate_deploy_mode(mode, source=f"connection {conn_id!r}")
    if deploy_mode == "cluster":
        cluster_manager(conn.host, conn_id=conn_id)
    return deploy_mode


def cluster_manager(master: str | None, *, conn_id: str) -> str:
    """
    The cluster manager that runs a cluster deploy mode job on a connection's master, picked by its URL as the Spark
    provider picks a submit backend per cluster manager (YARN, Kubernetes, else standalone): ``"standalone"`` for
    ``spark://host:port``, or a host without a scheme (read as ``spark://host``). It is the one with a cluster mode
    here (:class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`, the pieces in
    :mod:`airflow_provider_horovod.standalone`); a second would add its name, its mode and its package.

    :param master: the connection's host, ``spark://m:7077``, ``m``, ``yarn``, ``k8s://https://...``, ``local[4]``.
    :param conn_id: the connection, for the message.
    :return: ``"standalone"``.
    :raises HorovodJobError: the master is YARN's, Kubernetes', Mesos' or a local one: no cluster mode runs there
        (client deploy mode, spark-submit in the task, does).
    """
    url = (master or "").strip()
    for pattern, name in OTHER_MASTERS:
        if pattern.match(url):
            raise HorovodJobError(
                f"connection {conn_id!r}: cluster deploy mode submits to a Spark standalone master "
                f"(spark://host:port), and {url!r} is {name}; use deploy_mode='client' there"
            )
    return "standalone"
