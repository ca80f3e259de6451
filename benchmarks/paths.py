"""
Where things are: the repository, the example DAG the benchmarks train, the interpreter every contender uses.

Imported by :mod:`benchmarks.env` and :mod:`benchmarks.example_model`; it imports nothing of the harness.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
"""The repository root."""
EXAMPLE_DAG = REPO / "example_dags" / "horovod_digits_retraining.py"
"""The example DAG whose ``build_model`` and ``horovod_trainer`` the benchmarks run."""
PYTHON = sys.executable
"""This interpreter: the Spark driver's, the executors' and the ranks'."""
