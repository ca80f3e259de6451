"""Each launcher's behaviour inside a rank's process: where the rank is read from, and when the call that joins the
others is wrapped."""

from __future__ import annotations

import pytest

from airflow_provider_horovod.runtime.launchers import LAUNCHERS
from airflow_provider_horovod.runtime.rank.backends import RANK_BACKENDS, rank_backend_for
from airflow_provider_horovod.runtime.rank.guards import _MARK, Progress


def test_each_launcher_reads_the_rank_where_its_own_launcher_puts_it():
    assert set(RANK_BACKENDS) == set(LAUNCHERS)
    assert rank_backend_for("horovod").rank_variable == "HOROVOD_RANK"  # horovodrun
    assert rank_backend_for("torch").rank_variable == "RANK"  # torchrun
    with pytest.raises(ValueError, match=r"launcher must be one of \('horovod', 'torch'\), got 'mpi'"):
        rank_backend_for("mpi")


def test_horovod_wraps_hvd_init_at_the_start_and_nothing_once_released(monkeypatch):
    from horovod.common.basics import HorovodBasics

    monkeypatch.delenv("HOROVOD_AIRFLOW_PROGRESS_FD", raising=False)
    monkeypatch.setattr(HorovodBasics, "init", HorovodBasics.init)  # restored after the test
    from torch.distributed import distributed_c10d

    monkeypatch.setattr(distributed_c10d, "init_process_group", distributed_c10d.init_process_group)
    backend, progress = rank_backend_for("horovod"), Progress()
    backend.on_released(2, progress)
    assert not getattr(HorovodBasics.init, _MARK, False)
    backend.on_start(0, 2, progress)  # no HOROVOD_AIRFLOW_TIMELINE: no Timeline either
    assert getattr(HorovodBasics.init, _MARK, False)
    assert not getattr(distributed_c10d.init_process_group, _MARK, False)


def test_torch_wraps_init_process_group_only_once_released(monkeypatch):
    import torch.distributed as dist
    from horovod.common.basics import HorovodBasics
    from torch.distributed import distributed_c10d

    monkeypatch.delenv("HOROVOD_AIRFLOW_PROGRESS_FD", raising=False)
    monkeypatch.setattr(distributed_c10d, "init_process_group", distributed_c10d.init_process_group)
    monkeypatch.setattr(dist, "init_process_group", dist.init_process_group)  # both restored after the test
    monkeypatch.setattr(HorovodBasics, "init", HorovodBasics.init)
    backend, progress = rank_backend_for("torch"), Progress()
    backend.on_start(0, 2, progress)  # before its devices are set, torch is not touched
    assert not getattr(distributed_c10d.init_process_group, _MARK, False)
    backend.on_released(2, progress)
    assert getattr(distributed_c10d.init_process_group, _MARK, False)
    assert dist.init_process_group is distributed_c10d.init_process_group
    assert not getattr(HorovodBasics.init, _MARK, False)
