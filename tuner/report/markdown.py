"""The report's tables as Markdown, for docs and pull requests (no plots)."""

from __future__ import annotations

import json
import statistics
from typing import Any

from tuner.report.data import ReportData
from tuner.report.stats import METHOD


def fmt(value: Any, digits: int = 1) -> str:
    """Numbers with thousands separators; booleans and text as they are; nothing as '-'."""
    if value is None or value == "":
        return "-"
    if isinstance(value, tuple):
        return " / ".join(fmt(v, digits) for v in value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}"


def best_value(data: ReportData) -> float | None:
    """The winner's median over its runs (the value it was ranked by)."""
    return statistics.median(data.best_runs) if data.best_runs else data.best.value


def runs_note(data: ReportData) -> str:
    n = len(data.best_runs)
    return f" (median of {n} runs)" if n > 1 else ""


LAUNCH_HEAD = ["trial", "arm", "launch s", "weights s", "compile s", "compile cache",
               "kernels s", "CUDA graphs s", "KV profile s", "other s", "% of trial"]


def launch_rows(data: ReportData) -> list[list[Any]]:
    """The launch table's rows: an empty cell is a phase the engine's log did not time."""
    rows = []
    for r in data.launches:
        p = r.phases
        hit = p.get("compile_cache_hit")
        rows.append([r.number, r.arm, fmt(r.launch_s) if r.launch_s is not None else "not ready",
                     *(fmt(p.get(k), 1) if k in p else "" for k in ("weights_s", "compile_s")),
                     "" if hit is None else "hit" if hit else "miss",
                     *(fmt(p.get(k), 1) if k in p else ""
                       for k in ("kernels_s", "cuda_graphs_s", "kv_profile_s", "other_s")),
                     fmt(r.share_pct, 0) if r.share_pct is not None else ""])
    return rows


LOAD_HEAD = ["trial", "arm", "load sustained", "capped by (the lowest load missed)", "runs"]
LOAD_NOTE = ("The highest load each launched config sustained with every workload inside the "
             "SLOs (in the first workload's units; a workload runs at its load_scale share of it), "
             "the run that bracketed it from above, and the benchmark runs its search took. "
             "Each trial's load_curve holds every run.")


def load_rows(data: ReportData) -> list[list[Any]]:
    return [[r.number, r.arm, fmt(r.sustained), r.capped_by or "no run missed",
             r.runs] for r in data.loads]


def launch_summary(data: ReportData) -> str:
    share = data.launch_share
    head = (f"Launching the engine took {share[0]:.0f} % of the trials' time ({share[1]} "
            f"trial{'s' if share[1] != 1 else ''} that got ready: their launch seconds over their "
            "whole trials' seconds). " if share else "")
    return (head + "Phases are the engine's own timings from its log; an empty cell is a phase "
            "it did not time; other is the rest of the launch (process start, imports, the API "
            "server, the first health check).")


def _cell(value: Any) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def _table(head: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(_cell(h) for h in head) + " |",
             "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render(data: ReportData) -> str:
    out = [f"# {data.study}: tuning report", "",
           f"Objective {data.objective} ({', '.join(data.directions)}); trials: "
           + ", ".join(f"{v} {k}" for k, v in data.counts.items()) + f"; generated {data.generated}.",
           ""]
    out += [f"> {n}" for n in data.notes] + ([""] if data.notes else [])

    out += ["## What to run", ""]
    if data.pareto:
        out += [f"Pick from the Pareto front: trials {', '.join(map(str, data.pareto))} (their "
                "configs are in the trials table below).", ""]
    elif data.best is None:
        out += ["No feasible trial yet.", ""]
    else:
        b = data.best
        out += [f"Best feasible config: trial {b.number} ({b.arm}), {data.objective} = "
                f"**{fmt(best_value(data))}**{runs_note(data)}; "
                + ", ".join(f"{k}={v}" for k, v in b.params.items()), "",
                "```bash", data.best_command or "(no command recorded)", "```", ""]
        if data.quality:
            out += [f"Quality against the reference precision: {data.best_quality}.", ""]

    out += ["## Per workload: baseline vs best", ""]
    if data.workload_rows:
        out += [f"{data.comparison_source}. Values are geometric means over the "
                f"repeats; change is their ratio, with a {METHOD}.", "",
                _table(["workload", "metric", f"baseline ({data.baseline_arm})", f"best (trial {data.contender})", "change",
                        "n base/best", "failed requests"],
                       [[r.workload, r.label, fmt(r.baseline), fmt(r.best), r.change.text(),
                         f"{r.change.n_base}/{r.change.n_best}", r.failed_requests or ""]
                        for r in data.workload_rows]), ""]
    else:
        out += ["No comparison: see the notes above.", ""]

    if data.loads:
        out += ["## Load within the SLOs", "", LOAD_NOTE, "", _table(LOAD_HEAD, load_rows(data)), ""]

    out += ["## Parameter importances", ""]
    if data.importances:
        out += [_table(["parameter", "importance (PED-ANOVA, feasible trials)"],
                       [[k, fmt(v, 3)] for k, v in data.importances.items()]), ""]
    else:
        out += [data.importance_note, ""]

    out += ["## Failures by class", ""]
    if data.failures:
        out += [_table(["kind", "class", "trials", "rule", "log line"],
                       [[f.kind, f.failure_class, ", ".join(map(str, f.trials)), f.reason,
                         " / ".join(f"`{_clip(e)}`" for e in f.evidence)]
                        for f in data.failures]), ""]
    else:
        out += ["No trial failed or was pruned.", ""]

    if data.telemetry:
        out += ["## Telemetry", "",
                _table(["trial", "arm", "device", "J / output token", "peak memory MiB",
                        "mean load %", "peak KV cache %", "peak waiting", "preemptions",
                        "mean queue ms"],
                       [[r.number, r.arm, r.device, fmt(r.energy_j_per_token, 3),
                         fmt(r.peak_memory_mib), fmt(r.mean_load_pct), fmt(r.peak_kv_cache_pct),
                         fmt(r.peak_waiting), fmt(r.preemptions, 0), fmt(r.mean_queue_ms)]
                        for r in data.telemetry]), ""]

    if data.launches:
        out += ["## Where the launches' time went", "", launch_summary(data), "",
                _table(LAUNCH_HEAD, launch_rows(data)), ""]

    params = data.params
    quality = ["quality"] if data.quality else []
    out += ["## All trials", "",
            _table(["#", "arm", "status", data.objective, *quality, *params, "p99 TTFT ms",
                    "mean TPOT ms", "failure"],
                   [[t.number, t.arm, t.status, fmt(t.value), *([t.quality] if quality else []),
                     *(t.params.get(p, "") for p in params), fmt(t.p99_ttft_ms),
                     fmt(t.mean_tpot_ms), t.failure] for t in data.trials]),
            ""]

    out += ["## Environment of the winner", ""]
    if data.environment:
        out += [_table(["key", "value"], [[k, v if isinstance(v, str) else json.dumps(v)]
                                          for k, v in data.environment.items()]), ""]
    else:
        out += ["No environment recorded.", ""]
    return "\n".join(out)


def _clip(text: str, limit: int = 300) -> str:
    text = " ".join(text.split()).replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"
