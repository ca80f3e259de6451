"""
A rank that prints one 20 MB line and then fails (issue #34): the error stays within its bound and still names the
rank and the exception, the task log's copy of the line is cut with a note naming the file that keeps it whole, and
the whole line is in that file. Both launchers, barrier mode (a local[2] master, whose executors share the driver's
output) and ranks on the driver.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from airflow_provider_horovod.runtime import HorovodRunner, RankFailedError
from airflow_provider_horovod.runtime.bounds import MAX_LINE_CHARS, MAX_MESSAGE_CHARS

pytestmark = pytest.mark.spark

HUGE = 20_000_000


def print_huge_line_then_fail(launcher: str, size: int):
    import sys

    if launcher == "torch":
        import torch.distributed as dist

        dist.init_process_group("gloo")
        rank = dist.get_rank()
    else:
        import horovod.torch as hvd

        hvd.init()
        rank = hvd.rank()
    if rank == 1:
        sys.stdout.write("tensor(" + "7" * size + ")\n")
        sys.stdout.flush()
        raise ValueError("bad shard " + "y" * size)
    return rank


@pytest.mark.parametrize("launcher", ["horovod", "torch"])
@pytest.mark.parametrize("np_", [2, -2], ids=["barrier", "driver"])
def test_a_20_mb_line_then_a_failure_gives_a_bounded_error_naming_the_rank(request, capfd, launcher, np_):
    request.getfixturevalue("spark" if np_ > 0 else "spark_env")
    with pytest.raises(RankFailedError) as caught:
        HorovodRunner(np=np_, launcher=launcher, driver_log_verbosity="all", start_timeout_s=120).run(
            print_huge_line_then_fail, launcher=launcher, size=HUGE
        )
    message = str(caught.value)
    assert len(message) <= MAX_MESSAGE_CHARS, len(message)
    assert caught.value.rank == 1 and "rank 1" in message.splitlines()[0], message[:500]
    assert "ValueError: bad shard yyy" in message and "characters cut" in message, message[:500]
    assert 'raise ValueError("bad shard " + "y" * size)' in message  # the traceback's last frame is kept
    out, err = capfd.readouterr()
    log = out + err
    assert max(len(line) for line in log.splitlines()) <= MAX_LINE_CHARS + 100  # the task log's copy is cut ...
    cut = re.search(r"\[rank 1\] tensor\(7+ … \[(\d+) characters cut; the whole line is in (\S+)\]", log)
    assert cut, log[-3000:]
    kept = Path(cut.group(2))
    try:
        assert f"tensor({'7' * HUGE})\n" in kept.read_text()  # ... and the whole line is in the file it names
    finally:
        shutil.rmtree(kept.parent)
