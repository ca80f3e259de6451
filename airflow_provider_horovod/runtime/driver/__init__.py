"""
Runs in the Spark driver: ``HorovodRunner`` (runner.py), the driver program spark-submit starts, slot waiting, the
Spark Connect path, shipping the runtime, and reading the barrier stage's outcome.
"""
