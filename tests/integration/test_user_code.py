"""
Ordinary user code under ``HorovodRunner`` behaves as under ``horovodrun --gloo`` (issue #10, parts 2-4).

Each case runs on real Spark barrier tasks (np=2) and as processes on the driver (np=-2): the function's own
``hvd.init(...)`` options reach Horovod, ``SystemExit`` / ``os._exit`` / ``KeyboardInterrupt`` end a rank the way
``horovodrun`` counts them, and the first line of every failure names what actually happened.
"""

from __future__ import annotations

import time

import pytest

from airflow_provider_horovod.runtime import HorovodRunner, RankFailedError

pytestmark = pytest.mark.spark

MODES = [pytest.param(2, id="barrier-np2"), pytest.param(-2, id="driver-np-2")]
INTERNAL_WORDS = ("result.pkl", "FileNotFoundError", "collectAndServe", "error.json", "payload.bin")


def first_line(err: BaseException) -> str:
    return str(err).splitlines()[0]


def static_process_sets():
    import horovod.torch as hvd
    import torch

    mine = [hvd.ProcessSet([0]), hvd.ProcessSet([1])]
    hvd.init(process_sets=mine)
    # The process set's collective first: Horovod 0.28.1 itself sometimes shuts down on every rank when one on a
    # sub-process set follows one on the global set (docs/troubleshooting.md; plain horovodrun shows it too).
    own = mine[hvd.rank()]
    alone = hvd.allreduce(torch.tensor([5.0]), op=hvd.Sum, process_set=own).item()
    total = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()
    hvd.barrier()  # no rank shuts Horovod down while the other still works in its own set
    return {"size": hvd.size(), "total": total, "alone": alone} if hvd.rank() == 0 else None


def dynamic_process_sets():
    import horovod.torch as hvd
    import torch

    hvd.init(process_sets="dynamic")
    sets = [hvd.add_process_set([0]), hvd.add_process_set([1])]  # every rank adds the same sets, in order
    alone = hvd.allreduce(torch.tensor([2.0]), op=hvd.Sum, process_set=sets[hvd.rank()]).item()
    hvd.barrier()
    for process_set in sets:
        hvd.remove_process_set(process_set)
    total = hvd.allreduce(torch.tensor([2.0]), op=hvd.Sum).item()
    return [alone, total] if hvd.rank() == 0 else None


def init_shutdown_init():
    import horovod.torch as hvd
    import torch

    hvd.init()
    first = hvd.allreduce(torch.tensor([1.0]), op=hvd.Sum).item()
    hvd.shutdown()
    hvd.init()
    second = hvd.allreduce(torch.tensor([3.0]), op=hvd.Sum).item()
    return [first, second, hvd.size()] if hvd.rank() == 0 else None


def absl_style_entry_point():
    import sys

    def main():
        import horovod.torch as hvd
        import torch

        hvd.init()
        hvd.allreduce(torch.tensor([1.0]))
        return 0

    sys.exit(main())


def bare_system_exit():
    import horovod.torch as hvd

    hvd.init()
    raise SystemExit


def exit_status_on_rank_one(status):
    import sys

    import horovod.torch as hvd
    import torch

    hvd.init()
    print("epoch 1 done", flush=True)
    if hvd.rank() == 1:
        sys.exit(status)
    hvd.allreduce(torch.tensor([1.0]))  # rank 0 waits here for rank 1, which is gone


def os_exit_on_rank_one(status):
    import os

    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 1:
        os._exit(status)
    hvd.allreduce(torch.tensor([1.0]))


def os_exit_zero_everywhere():
    import os

    import horovod.torch as hvd

    hvd.init()
    os._exit(0)


def interrupted_on_rank_zero():
    import horovod.torch as hvd
    import torch

    hvd.init()
    if hvd.rank() == 0:
        raise KeyboardInterrupt("stopped by the user's own handler")
    hvd.allreduce(torch.tensor([1.0]))


def rank_one_returns_before_init():
    import os

    import horovod.torch as hvd
    import torch

    if os.environ["HOROVOD_RANK"] == "1":
        return None
    hvd.init()
    hvd.allreduce(torch.tensor([1.0]))


def no_horovod_at_all(x):
    return x * 2


def leaves_files_open_and_exit_handlers(out_dir):
    """Work a normal interpreter exit finishes: an unclosed, unflushed file, and an atexit handler."""
    import atexit
    import os

    import horovod.torch as hvd
    import torch

    hvd.init()
    rank = hvd.rank()
    log = open(os.path.join(out_dir, f"metrics-{rank}.txt"), "w")  # noqa: SIM115 - left open on purpose
    log.write("loss 0.1\n")  # stays in the buffer: nothing flushes or closes it
    leaves_files_open_and_exit_handlers.log = log  # referenced until the process ends
    atexit.register(lambda: open(os.path.join(out_dir, f"atexit-{rank}.txt"), "w").write(f"{hvd.size()}"))
    hvd.allreduce(torch.tensor([1.0]))
    return "trained" if rank == 0 else None


def imports_a_module_the_ranks_lack():
    import horovod.torch as hvd

    hvd.init()
    import helper_only_on_the_driver  # noqa: F401

    return "unreachable"


@pytest.mark.parametrize("np_", MODES)
class TestInitOptions:
    def test_static_process_sets_reach_horovod(self, spark, np_):
        assert HorovodRunner(np=np_).run(static_process_sets) == {"size": 2, "total": 2.0, "alone": 5.0}

    def test_dynamic_process_sets(self, spark, np_):
        assert HorovodRunner(np=np_).run(dynamic_process_sets) == [2.0, 4.0]

    def test_shutdown_and_init_again(self, spark, np_):
        assert HorovodRunner(np=np_).run(init_shutdown_init) == [2.0, 6.0, 2]


@pytest.mark.parametrize("np_", MODES)
class TestEndings:
    def test_a_ranks_open_files_and_atexit_handlers_finish(self, spark, np_, tmp_path):
        """The rank ends without the interpreter's teardown (worker.exit_rank); what teardown did still happens."""
        assert HorovodRunner(np=np_).run(leaves_files_open_and_exit_handlers, out_dir=str(tmp_path)) == "trained"
        for rank in (0, 1):
            assert (tmp_path / f"metrics-{rank}.txt").read_text() == "loss 0.1\n"
            assert (tmp_path / f"atexit-{rank}.txt").read_text() == "2"

    def test_sys_exit_zero_is_success_with_none(self, spark, np_):
        assert HorovodRunner(np=np_).run(absl_style_entry_point) is None
        assert HorovodRunner(np=np_).run(bare_system_exit) is None

    def test_os_exit_zero_everywhere_is_success_with_none(self, spark, np_):
        assert HorovodRunner(np=np_).run(os_exit_zero_everywhere) is None

    def test_a_function_that_never_initialises_horovod_returns(self, spark, np_):
        assert HorovodRunner(np=np_).run(no_horovod_at_all, x=21) == 42

    def test_non_zero_sys_exit_names_the_rank_and_status(self, spark, np_):
        with pytest.raises(RankFailedError) as info:
            HorovodRunner(np=np_).run(exit_status_on_rank_one, status=3)
        err = info.value
        assert (err.rank, err.exit_code) == (1, 3)
        assert "Horovod rank 1" in first_line(err) and "(exit code 3)" in first_line(err)
        assert "sys.exit(3)" in first_line(err)
        assert "epoch 1 done" in err.output_tail
        assert not any(word in str(err) for word in INTERNAL_WORDS), str(err)

    def test_os_exit_in_one_rank_names_the_rank_and_status(self, spark, np_):
        with pytest.raises(RankFailedError) as info:
            HorovodRunner(np=np_).run(os_exit_on_rank_one, status=7)
        assert (info.value.rank, info.value.exit_code) == (1, 7)
        assert "(exit code 7)" in first_line(info.value) and "os._exit()" in first_line(info.value)
        assert not any(word in str(info.value) for word in INTERNAL_WORDS), str(info.value)

    def test_a_rank_returning_before_init_is_named_at_once(self, spark, np_):
        """horovodrun would leave rank 0 waiting in hvd.init() until a timeout; here it stops with the reason."""
        started = time.monotonic()
        with pytest.raises(RankFailedError) as info:
            HorovodRunner(np=np_).run(rank_one_returns_before_init)  # start_timeout_s stays at its 600 s default
        assert info.value.rank == 0
        assert "rank 1 ended (exit code 0) without calling hvd.init()" in first_line(info.value)
        assert time.monotonic() - started < 120

    def test_keyboard_interrupt_is_a_failure_of_its_rank(self, spark, np_):
        with pytest.raises(RankFailedError) as info:
            HorovodRunner(np=np_).run(interrupted_on_rank_zero)
        assert info.value.rank == 0
        assert "KeyboardInterrupt: stopped by the user's own handler" in first_line(info.value)


class TestHeadlines:
    """The first line names the real cause (a missing module), never a timeout the launcher did not enforce."""

    @pytest.mark.parametrize("np_", MODES)
    def test_import_missing_on_the_ranks_inside_the_function(self, spark, np_):
        with pytest.raises(RankFailedError) as info:
            HorovodRunner(np=np_).run(imports_a_module_the_ranks_lack)
        line = first_line(info.value)
        assert "ModuleNotFoundError: No module named 'helper_only_on_the_driver'" in line, line
        assert "install it on the executors" in line
        assert "timed out" not in line and "start_timeout_s" not in line

    @pytest.mark.parametrize("np_", MODES)
    def test_unpickling_needs_a_module_the_ranks_lack(self, spark, np_):
        """Loading the function's argument imports a module the ranks cannot import (an installed package the
        driver has and the executors lack pickles by reference like this)."""
        with pytest.raises(RankFailedError) as info:
            HorovodRunner(np=np_).run(no_horovod_at_all, x=NeedsADriverOnlyModule())
        line = first_line(info.value)
        assert "could not load the training function" in line, line
        assert "ModuleNotFoundError: No module named 'helper_only_on_the_driver'" in line
        assert "timed out" not in line and "never reached" not in line
        assert not any(word in str(info.value) for word in INTERNAL_WORDS), str(info.value)


class NeedsADriverOnlyModule:
    """Unpickles by importing ``helper_only_on_the_driver``, as a by-reference object of that module would."""

    def __reduce__(self):
        import importlib

        return (importlib.import_module, ("helper_only_on_the_driver",))
