"""
Benchmark harness for airflow-provider-horovod (GitHub issue #6); not part of the test suite.

Run from the repository root: ``.venv/bin/python -m benchmarks [--quick]``. It measures

- B1 launch overhead of a trivial np=2 job (``HorovodRunner`` vs ``horovod.spark.run`` vs ``TorchDistributor``,
  plus the floor: a fresh interpreter importing torch + horovod.torch and an empty barrier job);
- B2 operator overhead (``airflow dags test`` of ``HorovodRunnerOperator`` vs a hand-written ``spark-submit``);
- B3 training throughput of the example model (ours vs ``horovod.spark.run`` vs bare ``horovodrun``; np=1 vs np=2);
- B4 Airflow-side memory (peak RSS of the task process and of the spark-submit JVM during training);
- B5 queueing on a busy standalone cluster;
- B7 launch overhead of a trivial np=2 DDP job (this provider's ``TorchDistributor`` vs PySpark's, plus the floor);
- B8 steady-state DDP throughput of the example model (ours vs PySpark's ``TorchDistributor`` vs bare
  ``torchrun``; DDP vs Horovod);

and writes ``docs/benchmarks.md`` and ``docs/benchmarks.png``. See ``benchmarks/README.md``.
"""
