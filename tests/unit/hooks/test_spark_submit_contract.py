"""
What the client-mode hook (hooks/horovod.py) relies on in the Spark provider's ``SparkSubmitHook`` beyond its public
API, checked on the installed provider: an upgrade of apache-airflow-providers-apache-spark that renames or
reshapes one of these fails here, not in a user's task.

``_SparkSubmit`` overrides ``_resolve_connection`` (the embedded ``local[np]`` master; it reads ``_principal``,
``_keytab`` and ``spark_binary``, which ``__init__`` must set before it calls ``_resolve_connection``) and
``_process_spark_submit_log`` (the application id as soon as the driver prints it); ``HorovodHook`` passes
``preexec_fn`` through ``submit(**kwargs)`` to ``Popen``, reads ``_submit_sp`` in ``on_kill`` and then calls
``on_kill``. The ``SparkSubmitHook`` arguments the hook sets itself and the executor-sizing ones it reads from
``spark_submit_kwargs`` must stay constructor arguments.
"""

from __future__ import annotations

import inspect
import os
import stat
import subprocess
import sys

import pytest
from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

from airflow_provider_horovod.hooks.horovod import _SparkSubmit
from airflow_provider_horovod.operators.common import RESERVED_SPARK_SUBMIT_KWARGS
from airflow_provider_horovod.runtime.driver import program as driver_program
from airflow_provider_horovod.standalone.slots import SUBMIT_KWARGS_CONF

P = inspect.Parameter


def _params(function) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


def test_overridden_methods_keep_their_signatures():
    assert _params(SparkSubmitHook._resolve_connection) == []
    (itr,) = _params(SparkSubmitHook._process_spark_submit_log)
    assert itr.kind in (P.POSITIONAL_ONLY, P.POSITIONAL_OR_KEYWORD) and itr.default is P.empty
    assert _params(SparkSubmitHook.on_kill) == []


def test_submit_takes_the_application_and_passes_the_rest_to_popen():
    params = {p.name: p for p in _params(SparkSubmitHook.submit)}
    assert params["application"].kind is P.POSITIONAL_OR_KEYWORD
    assert [p.kind for p in params.values()].count(P.VAR_KEYWORD) == 1  # preexec_fn: through it to Popen (below)


def test_constructor_takes_the_arguments_the_hook_sets_and_sizes_from():
    params = {p.name: p for p in _params(SparkSubmitHook.__init__)}
    wanted = (RESERVED_SPARK_SUBMIT_KWARGS - {"application"}) | set(SUBMIT_KWARGS_CONF) | {"spark_binary"}
    missing = sorted(wanted - set(params))
    assert not missing, f"SparkSubmitHook no longer takes {missing}"
    assert all(params[name].kind in (P.POSITIONAL_OR_KEYWORD, P.KEYWORD_ONLY) for name in wanted)


@pytest.fixture
def spark_conn(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_HOROVOD_CONTRACT", "spark://127.0.0.1:7077")
    return "horovod_contract"


def test_stock_constructor_sets_what_the_override_reads_and_resolves_the_same_keys(spark_conn):
    stock = SparkSubmitHook(conn_id=spark_conn, principal="p", keytab="k")
    assert (stock._principal, stock._keytab, stock._submit_sp) == ("p", "k", None)
    assert hasattr(stock, "spark_binary")
    ours = _SparkSubmit(local_master="local[2]", on_line=lambda line: None, conn_id=spark_conn)
    assert ours._connection["master"] == "local[2]"  # __init__ resolved the connection through the override
    assert set(ours._connection) == set(stock._connection)  # every key the stock hook reads later


def test_submit_runs_the_binary_and_feeds_each_line_to_the_log_processor(tmp_path, spark_conn):
    """A fake spark-submit on the PATH the hook gives it: the override sees every line, preexec_fn runs."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    fake = bindir / "spark-submit"
    marker_line = f"{driver_program.APP_MARKER} app-1 ..."
    fake.write_text(f"#!{sys.executable}\nimport sys\nprint('args', *sys.argv[1:])\nprint({marker_line!r})\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    started = tmp_path / "preexec"
    lines: list[str] = []
    hook = _SparkSubmit(
        local_master="local[1]",
        on_line=lines.append,
        conn_id=spark_conn,
        name="contract",
        application_args=["--np", "1"],
        deploy_mode="client",
        env_vars={"PATH": os.pathsep.join([str(bindir), os.environ.get("PATH", "")])},
    )
    hook.submit(application="app.py", preexec_fn=lambda: started.touch())
    assert isinstance(hook._submit_sp, subprocess.Popen) and hook._submit_sp.returncode == 0
    assert started.exists()
    assert lines[0].startswith("args --master local[1]") and lines[0].endswith("app.py --np 1")
    assert lines[1] == marker_line
    hook.on_kill()  # the process has ended: nothing to kill, no error
