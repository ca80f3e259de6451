"""The text of ``docs/benchmarks.md``: results table, chart, breakdowns, method, machine, versions, how to rerun."""

from __future__ import annotations

from benchmarks.profile import PHASES


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def page(results: dict, table: str, png: str | None, chart_note: str, rerun: str) -> str:
    """The whole Markdown page."""
    meta, cfg = results["meta"], results["config"]
    out = [
        "# Benchmarks",
        "",
        f"Measured by [`benchmarks/`](../benchmarks/README.md) on {meta['date']} ({cfg['mode']} run, "
        f"{meta.get('total_seconds', 0) / 60:.1f} min in all). Every number below comes from that run; "
        "rerun the harness to refresh this page (it is overwritten).",
        "",
        "## Results",
        "",
        table,
        "",
        "Ratios are of medians. B1/B2: seconds, lower is better; B3: samples/s, higher is better.",
        "",
        *_conditions(results),
        f"![B1 launch seconds and B3 samples/s]({png})" if png else f"Chart: {chart_note}.",
        "",
    ]
    out += _targets(results)
    out += _b1_breakdown(results)
    out += _b2_breakdown(results)
    out += _b4_details(results)
    out += _method(cfg)
    out += _machine(meta)
    out += ["## How to rerun", "", "From the repository root:", "", "```sh", rerun, "```", "",
            "See `benchmarks/README.md` for options (`--only b1,b3`, `--no-write`).", ""]
    return "\n".join(out)


def _conditions(results: dict) -> list[str]:
    """The machine's load during the run and any rounds cut by the time budget, as measured."""
    meta, lines = results["meta"], []
    loads = [x for x in (meta.get("load_start"), meta.get("load_end")) if x]
    if loads:
        peak = max(x[0] for x in loads)
        lines.append(f"1-minute load average at the start / end of the run: "
                     f"{' / '.join(f'{x[0]:.1f}' for x in loads)} on {meta['cores']} cores"
                     + (" - the machine was shared with other work and oversubscribed, so absolute times are "
                        "inflated and noisy; the interleaved ratios are the more meaningful part."
                        if peak > meta["cores"] else "."))
    for note in results.get("notes", []):
        lines.append(f"Time budget: {note}.")
    return [" ".join(lines), ""] if lines else []


def _targets(results: dict) -> list[str]:
    from benchmarks.report import rows

    lines = ["### Targets", ""]
    for r in rows(results):
        if r["target"]:
            lines.append(f"- {r['bench']} ({r['contender']}): {r['ratio'] or r['median']}, target {r['target']}: "
                         f"**{r['verdict']}**")
    return lines + [""]


def _b1_breakdown(results: dict) -> list[str]:
    prof = results.get("b1_profile")
    if not isinstance(prof, dict) or "error" in prof:
        return ["## Where the time goes: B1", "", f"Not profiled: {(prof or {}).get('error', 'B1 not run')}.", ""]
    launchers = prof["launchers"]
    names = list(launchers)
    lines = ["## Where the time goes: B1 launch", "",
             "One extra probe job per launcher (not part of the medians above): rank 0 returns wall-clock "
             "timestamps of its process creation, function entry, end of imports, end of init and end of the "
             "allreduce; the phases are the gaps between the call, those timestamps and the returned value. "
             "Single runs on a shared 2-core machine: read them as rough proportions.", "",
             "| Phase | What happens | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for phase, what in PHASES + [("total", "call -> value")]:
        cells = [launchers[n].get("error", "") if "error" in launchers[n] else _s(launchers[n].get(phase))
                 for n in names]
        lines.append(f"| {phase} | {what} | " + " | ".join(cells) + " |")
    lines += ["", "Reference costs measured alone in the same run:", "", "| Cost | Seconds |", "|---|---|"]
    lines += [f"| {k} | {_s(v) if isinstance(v, float) else v} |" for k, v in prof["reference"].items()]
    lines.append("")
    lines += _b1_reading(launchers.get("ours", {}), prof["reference"])
    return lines


def _b1_reading(ours: dict, ref: dict) -> list[str]:
    """Sentences putting ours' probe phases next to the reference costs (all numbers from this run)."""
    if "total" not in ours:
        return []

    def cost(fragment: str) -> float | None:
        value = next((v for k, v in ref.items() if fragment in k), None)
        return value if isinstance(value, float) else None

    before = ours["call -> rank process created"]
    start = ours["rank process created -> function entry"]
    after = ours["function return -> value at the caller"]
    two, barrier = cost("2 processes"), cost("empty barrier job")
    task_imports, rdv = cost("airflow_provider_horovod.runtime"), cost("http_server")
    exit_s, channel = cost("last line -> exit"), cost("LogServer")
    text = [f"Reading for ours ({_s(ours['total'])} in the probe):"]
    text.append(f"{_s(before)} ({_pct(before, ours)}) pass before the rank processes exist: the Spark job and "
                f"barrier tasks (an empty barrier job alone: {_s(barrier)}), task-side imports (runtime "
                f"{_s(task_imports)}, rendezvous server {_s(rdv)} when fresh), starting the rendezvous server, "
                "`allGather`, writing the payload and spawning the rank.")
    text.append(f"{_s(start)} ({_pct(start, ours)}) go from process creation to the function: two fresh "
                f"interpreters importing torch + horovod.torch at once take {_s(two)} measured alone, so imports are "
                + ("about all of it and unpickling + `hvd.init()` (Gloo rendezvous) are small."
                   if two is not None and two >= start else
                   f"about {_s(two)} of it and unpickling + `hvd.init()` (Gloo rendezvous) the other "
                   f"{_s(start - two) if two is not None else '-'}."))
    text.append(f"{_s(after)} ({_pct(after, ours)}) go from the function's return to the caller: a rank-like "
                f"process needs {_s(exit_s)} from its last line to its exit (interpreter and library teardown), "
                f"closing the driver log channel takes {_s(channel)} (its server polls for shutdown), and the rest "
                "is the result file, the final `barrier()`, task completion and `collect`.")
    return [" ".join(text), ""]


def _pct(value: float, probe: dict) -> str:
    return f"{100 * value / probe['total']:.0f}%" if probe.get("total") else "-"


def _b2_breakdown(results: dict) -> list[str]:
    b2 = results.get("b2")
    if not isinstance(b2, dict) or "error" in b2 or not b2.get("phases"):
        return []
    series = b2["series"]
    op = series["airflow dags test + HorovodRunnerOperator"].median
    hand = series["spark-submit by hand"].median
    phases = b2["phases"]
    hand_phases = b2.get("hand_phases", {})
    lines = ["## Where the time goes: B2 operator", "",
             "Phases (medians over the runs) of `airflow dags test`, from the timestamps of its own log lines, "
             "and of the hand-started spark-submit, from timestamps its script prints; both from the process "
             "start to its exit:", "", "| Phase | operator via `airflow dags test` | spark-submit by hand |",
             "|---|---|---|"]
    hand_job = sum(v for k, v in hand_phases.items() if k.startswith(("Horovod job", "Spark stop")))
    for k, v in phases.items():
        if k.startswith("Horovod job"):
            other = _s(hand_job) if hand_phases else ""
        else:
            other = _s(hand_phases[k]) if k in hand_phases else ""
        lines.append(f"| {k} | {_s(v)} | {other} |")
    submit = sum(v for k, v in phases.items() if k.startswith(("spark-submit", "SparkSession", "Horovod job")))
    lines += [f"| **total (median of the wall times)** | {_s(op)} | {_s(hand)} |", ""]
    noop = series["airflow dags test of a no-op task"].median
    if submit is not None and op and hand:
        diff = submit - hand
        lines += [f"spark-submit inside the task took {_s(submit)} from the command to its exit, {abs(diff):.2f} s "
                  f"{'more' if diff >= 0 else 'less'} than the hand-started spark-submit ({_s(hand)}); the phases "
                  f"around it add {_s(op - submit)}: Airflow's CLI start and imports, DAG parsing, metadata DB "
                  "writes, the in-process task runner and execution API of `airflow dags test`, and exit."]
        if noop:
            lines += [f"A no-op `@task` through the same `airflow dags test` takes {_s(noop)} in all, so "
                      f"{_s(op - noop)} of the operator run is the Horovod work plus the operator's own steps, "
                      f"against {_s(hand)} for the hand-started spark-submit "
                      f"(ratio {(op - noop) / hand:.2f}x once Airflow's fixed per-task cost is taken out)."]
        lines.append("")
    if results.get("airflow_migrate_s") is not None and not isinstance(results["airflow_migrate_s"], dict):
        lines += [f"(`airflow db migrate` of the throwaway AIRFLOW_HOME, done once before: "
                  f"{_s(results['airflow_migrate_s'])}; not counted.)", ""]
    return lines


def _b4_details(results: dict) -> list[str]:
    b4 = results.get("b4")
    if not isinstance(b4, dict) or "error" in b4:
        return []
    return ["## B4 details", "",
            f"`airflow dags test` of a one-task DAG training the example model for ~{b4['train_seconds']:.0f} s "
            f"(wall {_s(b4['wall_seconds'])}); a psutil thread sampled the process tree every "
            f"{b4['interval_s']} s ({b4['samples']} samples). Airflow task process = the Python processes of "
            "`airflow dags test` outside the JVM (it runs the task in-process); JVM = the spark-submit Java "
            "process; Spark Python workers + ranks = everything below the JVM. Peak of the whole tree: "
            f"{b4['peak_bytes']['total'] / 2**20:,.0f} MiB. Process names seen per role: "
            + "; ".join(f"{role}: {', '.join(names) or '-'}" for role, names in b4["process_names"].items())
            + ". Only the synchronous operator exists; a deferrable "
            "mode (task process released while Spark runs) is not implemented yet, so it has no row with a number.",
            ""]


def _method(cfg: dict) -> list[str]:
    return [
        "## What is measured", "",
        "- All contenders share one interpreter (`.venv`), one machine and a `local[2]` Spark bound to 127.0.0.1. "
        "B1 and B3 run in one process on one already-running SparkSession; contenders run in turns "
        "(A B C A B C ...) so slow spells of the shared machine hit all alike; B1 starts with one untimed warm-up "
        "round. Medians are reported.",
        f"- B1 (up to {cfg['b1_reps']} rounds, within a time budget; "
        "the Samples column shows those run): a trivial np=2 job (`hvd.init()`, one allreduce, return) from the call to "
        "rank 0's value: `HorovodRunner(np=2).run`, `horovod.spark.run(num_proc=2, use_gloo=True)`, "
        "`TorchDistributor(num_processes=2, local_mode=False, use_gpu=False).run` of a torch.distributed gloo "
        "all_reduce. Floor: a fresh interpreter running `import torch, horovod.torch`, plus an empty barrier "
        "job `sc.parallelize(range(2), 2).barrier().mapPartitions(lambda it: [1]).collect()`.",
        f"- B2 (up to {cfg['b2_reps']} rounds, within a time budget; "
        "the Samples column shows those run): wall time of `airflow dags test` of a one-task DAG running the B1 job "
        "through `HorovodRunnerOperator` (no `spark_default` connection: embedded `local[2]` master), vs "
        "`spark-submit --master local[2]` of a small script doing SparkSession + `HorovodRunner(np=2).run` with "
        "the same Spark properties the operator sets. Throwaway AIRFLOW_HOME (SQLite, migrated once), "
        "`AIRFLOW__CORE__LOAD_EXAMPLES=False`.",
        f"- B3 (up to {cfg['b3_reps']} rounds, within a time budget; "
        "the Samples column shows those run): the example DAG's `build_model()` MLP on its `load_digits` split, batch "
        f"size {cfg['batch_size']} per rank, SGD + `hvd.DistributedOptimizer`, one torch thread per rank; "
        f"{cfg['b3_warmup']} warm-up steps, then {cfg['b3_steps']} steps timed inside the training function "
        "(between two allreduces); global samples/s = steps x batch x ranks / seconds. Launch time is excluded.",
        f"- B4: peak RSS while `airflow dags test` trains the example model for ~{cfg['b4_seconds']:.0f} s "
        "through the operator (sync mode).",
        "",
    ]


def _machine(meta: dict) -> list[str]:
    v = meta["versions"]
    return ["## Machine and versions", "",
            f"- {meta['cores']} cores ({meta['cpu']}), {meta['memory_gib']:.1f} GiB memory, {meta['os']}; "
            "shared with other work while measuring",
            f"- Python {meta['python']}, {meta['java']}",
            "- " + ", ".join(f"{k} {val}" for k, val in v.items()),
            f"- load average (1/5/15 min) at start: {meta.get('load_start')}, at end: {meta.get('load_end')}", ""]
