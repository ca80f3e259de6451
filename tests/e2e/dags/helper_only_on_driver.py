"""
A helper module beside the pipeline files only: importable by the scheduler's task processes (their folder is
on sys.path there), not by Spark executors. Shipped by value when a callable references it; a function that
imports it on the ranks fails there with ``No module named 'helper_only_on_driver'``.
"""

PREFIX = "helped"


def describe(x):
    return f"{PREFIX}:{x}"
