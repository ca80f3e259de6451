"""
B12 (#38): the driver side of a job with up to 1,024 ranks, simulated on one machine.

What grows with the ranks on the driver is all ours: one log-channel connection per barrier task
(:class:`~airflow_provider_horovod.runtime.wire.logs.LogServer`), every rank's ``report()`` records, output lines
and heartbeats over it, the :class:`~airflow_provider_horovod.runtime.driver.metrics.MetricsCollector` that makes the
progress line and the files of them, and the
:class:`~airflow_provider_horovod.runtime.driver.heartbeats.HeartbeatWatch`.
Here those run for real, in this process as in a job's driver, against **stand-in ranks**: processes
(:data:`STAND_IN_PROCESSES`) that each hold the connections of many ranks and speak the real protocol through the real
:class:`~airflow_provider_horovod.runtime.wire.logs.LogClient`, with no framework imported:

- a task's milestones (``loaded``, ``init``, ``ready``), then a heartbeat every
  :data:`~airflow_provider_horovod.runtime.wire.logs.HEARTBEAT_INTERVAL_S`;
- two ``report()`` records a second (a rank's sender sends at most every
  :data:`~airflow_provider_horovod.runtime.reports.SEND_INTERVAL_S`: this is the most a rank sends), each a step
  further, with ``loss`` and ``lr``;
- one line of output a second (``driver_log_verbosity="all"``: every rank's lines reach the driver; the default sends
  rank 0's only).

Each rank's sends are spread over the second (rank ``r`` starts ``r / N`` s in), as ranks started at different
times would. Rank 0's stand-in notes when it sent each step, so how far each progress line is behind is measured, not
estimated: the time since rank 0 sent the first step the line does not show yet, when the line was written (0 when it
shows the newest step sent; the line's age, since the step it shows was sent, is kept too).

Measured per size: the driver's CPU (this process, every thread: the log server's handlers, the collector's thread,
the watch) in cores over the steady window, its peak RSS and threads, the progress lines' lag, what arrived against
what was sent (rank 0's records in ``metrics.jsonl`` all of them; every rank's last step in ``progress.json``; every
line), heartbeats the watch took for silence (none expected), and the files written.

Also measured: Horovod's rendezvous store as task 0 runs it (:func:`~airflow_provider_horovod.runtime.task.
rendezvous._start_rendezvous`, Horovod's own Python HTTP server) under the requests Gloo's full-mesh connect makes:
each rank puts its addresses (one per peer) and gets every other rank's, so the requests grow as ``N^2`` and the bytes
as ``N^3``. Run to :data:`RENDEZVOUS_SIZES` and extrapolated with the measured rate, said as such on the page.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks.sampling import Sampler

SIZES = (64, 256, 1024)
"""The simulated jobs' numbers of ranks."""
STAND_IN_PROCESSES = 4
"""Processes the stand-in ranks are spread over (each holds ``N / 4`` ranks' connections, one thread)."""
RECORDS_PER_S = 2.0
LINES_PER_S = 1.0
RENDEZVOUS_SIZES = (16, 32, 64, 128)
"""Ranks for which Gloo's full-mesh requests are run against Horovod's store; larger sizes are extrapolated."""
BACKLOG_SIZES = (16, 32)
"""Sizes also run against a store with Horovod's own listen backlog (5), for the difference the backlog makes."""
ADDRESS_BYTES = 48
"""Bytes per peer address in a rank's Gloo value (a ``sockaddr_storage``-sized entry and its sequence number)."""


def _groups(size: int) -> list[list[int]]:
    """The ranks of a ``size``-rank job dealt over :data:`STAND_IN_PROCESSES` processes (fewer for a small job)."""
    return [list(range(size))[i::STAND_IN_PROCESSES] for i in range(min(STAND_IN_PROCESSES, size))]


# --- the stand-in ranks (a process of their own: ``python -m benchmarks.scale_sim stand-ins ...``) ---------------


def stand_ins(
    address: tuple[str, int],
    token: str,
    ranks: Sequence[int],
    size: int,
    seconds: float,
    out: str,
    all_lines: bool = True,
) -> None:
    """
    Run stand-in ranks ``ranks`` of a ``size``-rank job for ``seconds``: each its own log-channel connection, the
    milestones, heartbeats, two records and one line a second (see the module). Writes ``out`` (JSON): what was sent,
    and for rank 0 when each step was sent.

    :param address: the driver's log server.
    :param token: its token.
    :param ranks: the ranks this process stands in for.
    :param size: the job's number of ranks.
    :param seconds: how long the ranks "train".
    :param out: where the counts go.
    :param all_lines: every rank sends its lines (``driver_log_verbosity="all"``); else rank 0 only (the default).
    """
    from airflow_provider_horovod.runtime.wire.logs import HEARTBEAT_INTERVAL_S, LogClient
    from airflow_provider_horovod.runtime.wire.progress_format import MILESTONE_EVENT, MILESTONES

    clients = {rank: LogClient(address, token) for rank in ranks}
    connect_s: list[float] = []

    def begin(rank: int) -> None:  # every task connects at about the same time, as a barrier stage's do
        began = time.monotonic()
        for milestone in MILESTONES:
            clients[rank].send_metrics(
                {"event": MILESTONE_EVENT, "rank": rank, "milestone": milestone, "time": time.time()}
            )
        connect_s.append(time.monotonic() - began)

    openers = [threading.Thread(target=begin, args=(rank,)) for rank in ranks]
    for opener in openers:
        opener.start()
    for opener in openers:
        opener.join()
    start = time.monotonic() + 0.5
    # every (time, kind, rank) this process sends, in order; each rank offset by rank / size of a second
    events: list[tuple[float, int, int]] = []
    for rank in ranks:
        offset = rank / size
        events += [(offset + i / RECORDS_PER_S, 0, rank) for i in range(int(seconds * RECORDS_PER_S))]
        if all_lines or rank == 0:
            events += [(offset + i / LINES_PER_S, 1, rank) for i in range(int(seconds * LINES_PER_S))]
        events += [(offset + i * HEARTBEAT_INTERVAL_S, 2, rank) for i in range(int(seconds / HEARTBEAT_INTERVAL_S) + 1)]
    events.sort()
    steps = dict.fromkeys(ranks, 0)
    sent = {"records": 0, "lines": 0, "heartbeats": 0, "late_s": 0.0, "max_connect_s": max(connect_s)}
    rank0_sent_at: dict[int, float] = {}
    total = int(seconds * RECORDS_PER_S)
    for at, kind, rank in events:
        delay = start + at - time.monotonic()
        if delay > 0:
            time.sleep(delay)  # the schedule of a rank's sends: pacing, not synchronisation
        else:
            sent["late_s"] = max(sent["late_s"], -delay)
        client = clients[rank]
        if kind == 0:
            steps[rank] += 1
            step = steps[rank]
            now = time.time()
            client.send_metrics(
                {
                    "time": now,
                    "rank": rank,
                    "step": step,
                    "total_steps": total,
                    "epoch": 0,
                    "metrics": {"loss": 1.0 / step, "lr": 0.01},
                }
            )
            if rank == 0:
                rank0_sent_at[step] = now
            sent["records"] += 1
        elif kind == 1:
            client.send(f"[rank {rank}] step {steps[rank]} loss {1.0 / max(1, steps[rank]):.4f} and some text " * 2)
            sent["lines"] += 1
        else:
            client.heartbeat({"task": rank, "rank": rank, "host": "127.0.0.1", "stage": 0, "pid": os.getpid()})
            sent["heartbeats"] += 1
    for client in clients.values():
        client.close()
    Path(out).write_text(json.dumps({**sent, "last_step": steps, "rank0_sent_at": rank0_sent_at}))


# --- the driver side ------------------------------------------------------------------------------------------


class _Sampler(Sampler):
    """This process's CPU seconds, RSS and threads every ``interval_s`` (psutil), from a thread."""

    def __init__(self, interval_s: float = 0.2) -> None:
        import psutil

        super().__init__(interval_s, name="b12-driver-sampler")
        self._proc = psutil.Process()
        self.samples: list[tuple[float, float, int, int]] = []  # (monotonic, cpu seconds, rss bytes, threads)

    def _sample(self) -> None:
        cpu = self._proc.cpu_times()
        self.samples.append(
            (time.monotonic(), cpu.user + cpu.system, self._proc.memory_info().rss, self._proc.num_threads())
        )

    def cores(self, start: float, end: float) -> float | None:
        """CPU seconds per second between two monotonic times (the samples nearest inside them)."""
        inside = [s for s in self.samples if start <= s[0] <= end]
        if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
            return None
        return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def _step_of(line: str) -> int | None:
    if not line.startswith("step "):
        return None
    head = line.split()[1]
    return int(head.split("/")[0]) if head.split("/")[0].isdigit() else None


def simulate(size: int, seconds: float, workdir: str, verbosity_all: bool = True) -> dict[str, Any]:
    """
    One simulated job of ``size`` stand-in ranks for ``seconds`` against the real driver-side code.

    :param size: the number of ranks.
    :param seconds: how long they send.
    :param workdir: where the artifact directory and the task log go.
    :param verbosity_all: every rank's lines reach the driver (``driver_log_verbosity="all"``); else rank 0's only.
    :return: the measures (see the module) and the raw samples.
    """
    from airflow_provider_horovod.runtime.driver.heartbeats import HeartbeatWatch
    from airflow_provider_horovod.runtime.driver.metrics import MetricsCollector
    from airflow_provider_horovod.runtime.wire.progress_format import METRICS_FILE, PROGRESS_FILE

    artifacts = Path(workdir) / f"artifacts-{size}"
    artifacts.mkdir(parents=True, exist_ok=True)
    task_log = Path(workdir) / f"task-log-{size}.txt"
    progress: list[tuple[float, str]] = []
    watch = HeartbeatWatch(30.0)
    silent_seen: list[int] = []
    procs: list[subprocess.Popen] = []
    outs: list[str] = []
    with task_log.open("w") as stream, _Sampler() as sampler:
        started = time.monotonic()
        with MetricsCollector(
            str(artifacts),
            emit=lambda line: progress.append((time.time(), line)),
            ranks=size,
            init_call="init_process_group()",
        ) as collector:
            from airflow_provider_horovod.runtime.wire.logs import LogServer

            def on_line(line: str) -> None:
                stream.write(line + "\n")

            with LogServer("127.0.0.1", on_line=on_line, on_metrics=collector.add, on_heartbeat=watch.record) as logs:
                for n, ranks in enumerate(_groups(size)):
                    out = str(Path(workdir) / f"stand-ins-{size}-{n}.json")
                    outs.append(out)
                    spec = {
                        "address": list(logs.address),
                        "token": logs.token,
                        "ranks": ranks,
                        "all_lines": verbosity_all,
                        "size": size,
                        "seconds": seconds,
                        "out": out,
                    }
                    procs.append(_stand_in_process(spec))
                steady_from = time.monotonic() + 3.0  # connections made, milestones in
                while any(p.poll() is None for p in procs):
                    silent_seen += [beat.get("task") for beat, _ in watch.silent()]
                    time.sleep(0.5)  # a look at the watch, as the driver's Watchdog does
                steady_to = time.monotonic()
                codes = [p.returncode for p in procs]
            collector.finish("finished")
        wall_s = time.monotonic() - started
    if any(codes):
        raise RuntimeError(f"stand-in processes exited with {codes}")
    sent = [json.loads(Path(o).read_text()) for o in outs]
    rank0_sent_at = {int(k): v for s in sent for k, v in s["rank0_sent_at"].items()}
    last_step = {int(k): v for s in sent for k, v in s["last_step"].items()}
    # How far behind each progress line is: the time since rank 0 sent the first step the line does not show yet
    # (0 when it shows the newest step sent), at the moment the line was written.
    lags, ages = [], []
    for at, line in progress:
        step = _step_of(line)
        if step is None or step not in rank0_sent_at:
            continue
        ages.append(at - rank0_sent_at[step])
        newer = rank0_sent_at.get(step + 1)
        lags.append(max(0.0, at - newer) if newer is not None and newer < at else 0.0)
    snapshot = json.loads((artifacts / PROGRESS_FILE).read_text())
    history = (artifacts / METRICS_FILE).read_text().splitlines()
    lines_received = sum(1 for _ in task_log.open())
    arrived_steps = {int(r): v.get("step") for r, v in snapshot.get("ranks", {}).items()}
    files = {p.name: p.stat().st_size for p in artifacts.iterdir() if p.is_file()}
    peak = max((s[2] for s in sampler.samples), default=0)
    threads = max((s[3] for s in sampler.samples), default=0)
    return {
        "size": size,
        "seconds": seconds,
        "wall_s": wall_s,
        "driver_cores": sampler.cores(steady_from, steady_to),
        "driver_peak_rss": peak,
        "driver_threads": threads,
        "lags_s": lags,
        "ages_s": ages,
        "max_lag_s": max(lags) if lags else None,
        "progress_lines": len(progress),
        "records_sent": sum(s["records"] for s in sent),
        "rank0_records_sent": len(rank0_sent_at),
        "rank0_records_kept": len(history),
        "ranks_last_step_right": sum(1 for r, step in last_step.items() if arrived_steps.get(r) == step),
        "lines_sent": sum(s["lines"] for s in sent),
        "lines_received": lines_received,
        "heartbeats_sent": sum(s["heartbeats"] for s in sent),
        "silent_tasks": sorted({t for t in silent_seen if t is not None}),
        "stand_ins_late_s": max(s["late_s"] for s in sent),
        "max_connect_s": max(s["max_connect_s"] for s in sent),
        "files": files,
        "samples": sampler.samples,
    }


# --- Horovod's rendezvous store under Gloo's full mesh --------------------------------------------------------


def rendezvous_clients(port: int, size: int, ranks: Sequence[int], out: str) -> None:
    """
    Gloo's full-mesh requests of ``ranks`` (of ``size``) against the store on ``port``, one thread per rank, as
    ``connectFullMesh`` makes them through Horovod's ``HTTPStore``: PUT its value (``size - 1`` addresses of
    :data:`ADDRESS_BYTES`) under ``global/<rank>``, then for every other rank ``store.wait`` (a GET of the key, a 404
    retried after 10 ms) and ``store.get`` (a GET); a new connection per request. The job's ``local_<host>`` and
    ``cross_<n>`` meshes (on one host: another mesh of every rank, and single-rank ones) are not made: the global
    mesh is the floor. Then each rank's "done" report (the real ``_report_done``), as a rank's task makes it when the
    rank exited. Writes ``out`` (JSON): requests, retries, bytes received.

    :param port: the store's port on 127.0.0.1.
    :param size: the job's ranks.
    :param ranks: the ranks this process stands in for.
    :param out: where the counts go.
    """
    import http.client

    from airflow_provider_horovod.runtime.task.rendezvous import _report_done

    value = b"a" * (ADDRESS_BYTES * (size - 1))
    counts = {"requests": 0, "bytes": 0, "retries": 0, "resets": 0}
    lock = threading.Lock()

    def call(method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        for _ in range(20):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            try:
                conn.request(method, path, body=body, headers={"Content-Length": str(len(body or b""))})
                response = conn.getresponse()
                return response.status, response.read()
            except ConnectionError:  # a full listen queue (Horovod's backlog of 5) resets some connections
                with lock:
                    counts["resets"] += 1
                time.sleep(0.1)
            finally:
                conn.close()
        raise ConnectionError(f"{method} {path}: reset 20 times")

    def rank_requests(rank: int) -> None:
        requests, got, retries = 1, 0, 0
        call("PUT", f"/global/{rank}", value)
        for peer in range(size):
            if peer == rank:
                continue
            while True:  # store.wait({key}): Horovod's HTTPStore checks the key with a GET of it
                status, data = call("GET", f"/global/{peer}")
                requests += 1
                if status == 200:
                    got += len(data)
                    break
                retries += 1
                time.sleep(0.01)  # Gloo's wait polls the store: the key is not there yet
            status, data = call("GET", f"/global/{peer}")  # then store.get(key)
            requests += 1
            got += len(data)
        _report_done("127.0.0.1", port, rank)  # the rank exited: the real "done" report task 0 waits for
        with lock:
            counts["requests"] += requests + 1
            counts["bytes"] += got
            counts["retries"] += retries

    workers = [threading.Thread(target=rank_requests, args=(rank,)) for rank in ranks]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    Path(out).write_text(json.dumps(counts))


def rendezvous_full_mesh(size: int, workdir: str, backlog: int | None = None) -> dict[str, Any]:
    """
    Gloo's full-mesh connect of ``size`` ranks (:func:`rendezvous_clients`, in :data:`STAND_IN_PROCESSES` processes)
    against Horovod's store as task 0 runs it (:func:`~airflow_provider_horovod.runtime.task.rendezvous.
    _start_rendezvous`). Returns the seconds from the first request to the last answer, the requests, retries and
    bytes, and the requests per second: ``N^2`` requests, ``N^3`` bytes.

    :param size: the ranks.
    :param workdir: where the clients' counts go.
    :param backlog: the store's listen backlog for this run (``5``: Horovod's own, before this project set
        :data:`~airflow_provider_horovod.runtime.task.rendezvous.LISTEN_BACKLOG`); ``None``: the project's.
    """
    from airflow_provider_horovod.runtime.task import rendezvous
    from airflow_provider_horovod.runtime.task.plan import local_plan

    ours = rendezvous.LISTEN_BACKLOG
    rendezvous.LISTEN_BACKLOG = ours if backlog is None else backlog
    try:
        server, port = rendezvous._start_rendezvous(local_plan(size))
    finally:
        rendezvous.LISTEN_BACKLOG = ours  # read once, when the store's class is made
    groups = _groups(size)
    outs = [str(Path(workdir) / f"rendezvous-{size}-{n}.json") for n in range(len(groups))]
    try:
        start = time.perf_counter()
        procs = [
            _stand_in_process({"rendezvous": port, "size": size, "ranks": g, "out": o})
            for g, o in zip(groups, outs, strict=True)
        ]
        codes = [p.wait(timeout=600) for p in procs]
        seconds = time.perf_counter() - start
        all_done = server.ranks_done.wait_for(range(size), timeout_s=10)  # task 0 learnt of every rank's exit
    finally:
        rendezvous._stop_rendezvous(server)
    if any(codes):
        raise RuntimeError(f"rendezvous client processes exited with {codes}")
    counts = [json.loads(Path(o).read_text()) for o in outs]
    total = {k: sum(c[k] for c in counts) for k in ("requests", "bytes", "retries", "resets")}
    return {
        "size": size,
        "seconds": seconds,
        **total,
        "requests_per_s": total["requests"] / seconds,
        "backlog": backlog,
        "all_done": all_done,
    }


def _stand_in_process(spec: dict[str, Any]) -> subprocess.Popen:
    """``python -m benchmarks.scale_sim stand-ins`` with ``spec`` on its stdin."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "benchmarks.scale_sim", "stand-ins"],
        stdin=subprocess.PIPE,
        text=True,
        cwd=str(Path(__file__).resolve().parent.parent),
    )
    assert proc.stdin is not None
    proc.stdin.write(json.dumps(spec))
    proc.stdin.close()
    return proc


def extrapolate_rendezvous(measured: list[dict[str, Any]], sizes: Sequence[int]) -> dict[int, float]:
    """
    Seconds of Gloo's full-mesh requests at ``sizes``, from the measured rate at the largest measured size:
    ``N (1 + 2 (N - 1))`` requests (a PUT, then a wait and a get per peer) at that rate (the bytes grow as ``N^3``;
    not counted, so this is a floor).

    :param measured: :func:`rendezvous_full_mesh` results.
    :param sizes: ranks to extrapolate to.
    """
    largest = max(measured, key=lambda m: m["size"])
    rate = largest["requests_per_s"]
    return {n: n * (1 + 2 * (n - 1)) / rate for n in sizes}


def plan_seconds(size: int) -> float:
    """Seconds for the slot plan of ``size`` ranks over ``size / 8`` hosts (what task 0 computes at the start)."""
    from airflow_provider_horovod.runtime.task.plan import build_plan

    addresses = [f"10.0.{(i // 8) // 256}.{(i // 8) % 256}" for i in range(size)]
    start = time.perf_counter()
    build_plan(addresses)
    return time.perf_counter() - start


def run_b12(
    sizes: Sequence[int], seconds: float, budget_s: float, notes: list[str], log: Callable[[str], None]
) -> dict[str, Any]:
    """
    B12: :func:`simulate` at each of ``sizes`` (ascending; a size whose run would pass ``budget_s`` is skipped and
    noted), Horovod's rendezvous store at :data:`RENDEZVOUS_SIZES`, and the slot plan at each size.

    :param sizes: numbers of ranks, e.g. ``(64, 256, 1024)``.
    :param seconds: how long each simulated job sends.
    :param budget_s: the benchmark's time budget, seconds.
    :param notes: the run's notes (a cut is recorded there).
    :param log: progress messages.
    """
    out: dict[str, Any] = {
        "sizes": {},
        "records_per_s": RECORDS_PER_S,
        "lines_per_s": LINES_PER_S,
        "processes": STAND_IN_PROCESSES,
        "cores_goal": 1.0,
        "lag_goal_s": 1.0,
        "load_start": os.getloadavg(),
    }
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="horovod-b12-") as workdir:
        for size in sorted(sizes):
            if time.monotonic() - start + seconds + 15 > budget_s:
                notes.append(f"B12: {size} ranks skipped (the run would have passed its {budget_s:.0f} s budget)")
                continue
            result = simulate(size, seconds, workdir)
            result["plan_s"] = plan_seconds(size)
            out["sizes"][size] = result
            log(
                f"B12 {size} ranks: driver {result['driver_cores']:.2f} cores, max lag {result['max_lag_s']:.2f} s, "
                f"rank 0 records {result['rank0_records_kept']}/{result['rank0_records_sent']}, "
                f"lines {result['lines_received']}/{result['lines_sent']}"
            )
        out["rendezvous"] = []
        for size in RENDEZVOUS_SIZES:
            if time.monotonic() - start > budget_s:
                notes.append(f"B12: the rendezvous at {size} ranks skipped (time budget)")
                break
            measured = rendezvous_full_mesh(size, workdir)
            out["rendezvous"].append(measured)
            log(
                f"B12 rendezvous {size} ranks: {measured['seconds']:.2f} s, {measured['requests_per_s']:.0f} requests/s"
            )
        # the listen backlog's part: the same requests against a store with Horovod's own backlog of 5
        out["rendezvous_backlog_5"] = [rendezvous_full_mesh(size, workdir, backlog=5) for size in BACKLOG_SIZES]
        for m in out["rendezvous_backlog_5"]:
            log(f"B12 rendezvous {m['size']} ranks, backlog 5: {m['seconds']:.2f} s")
    if out["rendezvous"]:
        out["rendezvous_extrapolated_s"] = extrapolate_rendezvous(out["rendezvous"], (256, 512, 1024))
    out["load_end"] = os.getloadavg()
    return out


def _main(argv: list[str]) -> int:
    if argv[:1] == ["stand-ins"]:
        spec = json.loads(sys.stdin.read())
        if "rendezvous" in spec:
            rendezvous_clients(spec["rendezvous"], spec["size"], spec["ranks"], spec["out"])
            return 0
        stand_ins(
            tuple(spec["address"]),
            spec["token"],
            spec["ranks"],
            spec["size"],
            spec["seconds"],
            spec["out"],
            spec["all_lines"],
        )
        return 0
    sizes = [int(s) for s in argv] or [64, 256, 1024]
    result = run_b12(sizes, 20.0, 600.0, [], lambda m: print(m, file=sys.stderr, flush=True))
    for size, r in result["sizes"].items():
        r.pop("samples"), r.pop("lags_s")
        print(size, json.dumps(r, default=str))
    print(json.dumps(result["rendezvous"]), json.dumps(result.get("rendezvous_extrapolated_s")))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
