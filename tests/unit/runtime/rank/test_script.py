"""A training script run as a rank (runtime/rank/script.py), as torchrun runs it in each worker."""

from __future__ import annotations

import sys

import pytest

from airflow_provider_horovod.runtime.rank.script import run_script


def test_the_script_runs_as_main_with_its_arguments_and_its_directory_on_the_path(tmp_path, capsys):
    (tmp_path / "helper_mod_for_script.py").write_text("VALUE = 41\n")
    script = tmp_path / "train.py"
    script.write_text(
        "import sys\nimport helper_mod_for_script\n"
        "if __name__ == '__main__':\n"
        "    print('ARGV', sys.argv[1:], helper_mod_for_script.VALUE + 1)\n"
    )
    argv, path = list(sys.argv), list(sys.path)
    try:
        run_script(str(script), ["--epochs", 3])
    finally:
        sys.modules.pop("helper_mod_for_script", None)
    assert capsys.readouterr().out == "ARGV ['--epochs', '3'] 42\n"
    assert sys.argv == argv and sys.path == path  # restored


def test_a_failing_script_fails_the_call_and_a_missing_one_is_named(tmp_path):
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit(3)\n")
    with pytest.raises(SystemExit) as exited:
        run_script(str(script))
    assert exited.value.code == 3
    with pytest.raises(FileNotFoundError, match="no training script at .*nope.py"):
        run_script(str(tmp_path / "nope.py"))
