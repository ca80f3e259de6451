"""
Everything that knows the Spark standalone master, the one cluster manager cluster deploy mode submits to (the
Airflow side; the driver's own view of the cluster is :mod:`airflow_provider_horovod.runtime.cluster`):

- :mod:`~airflow_provider_horovod.standalone.hook`: ``HorovodStandaloneHook``, the master's REST submission server
  and web UI from a ``spark`` connection: submit, follow and kill a driver, and the async twins of following and
  killing (``a_status``, ``a_kill``) that the deferral trigger awaits;
- :mod:`~airflow_provider_horovod.standalone.master`: where the master answers, read from the connection; the
  route a driver is followed and killed on (what the trigger persists); the reachability check;
- :mod:`~airflow_provider_horovod.standalone.submission`: what a job is on the master: the staged files and the
  ``create`` request that starts its driver;
- :mod:`~airflow_provider_horovod.standalone.gateway`: the same driver through spark-submit's legacy gateway (a
  master with Spark RPC authentication runs no REST server);
- :mod:`~airflow_provider_horovod.standalone.poll`: one poll of a driver, as the task's own wait and the deferral
  trigger read it, the trigger's event, and the result read once the wait is over;
- :mod:`~airflow_provider_horovod.standalone.slots`: the master's task slots seen from Airflow: the "can never fit"
  check, the standalone defaults, the wait watcher;
- :mod:`~airflow_provider_horovod.standalone.durable`: the persisted record of a submitted driver and what each
  driver state means to a retry.

The operator's cluster deploy mode on this master is
:class:`~airflow_provider_horovod.operators.modes.cluster.ClusterMode`, chosen by deploy mode and master URL
(:func:`~airflow_provider_horovod.operators.modes.cluster_manager`); the deferral trigger,
:class:`~airflow_provider_horovod.triggers.horovod.HorovodSparkJobTrigger`, stays where persisted triggers expect it
and dispatches through the hook. A second cluster manager (YARN, Kubernetes) would get a package of its own with the
same parts, a mode, and its name in ``cluster_manager``.
"""
