"""The H200 head-to-head, read back here (issue 22, item 5): the campaign's state
(benchmarks/gpu_campaign.py) and the tune studies it exported, as one table per tool and the judge's
ratios to the sweep's pick.

Per tool: wall-clock to its recommendation (the sweep: its invocations; tune: the intervals of its
own steps, so neither counts the gaps between stays), engine launches, refused configs launched,
the config it recommends, and its best-so-far against that wall-clock. The judge: each arm's
median over its launches, and each arm's ratio to the sweep's pick with a 95 % bootstrap interval
and with the machine's drift taken out (drift_adjusted). The later judges (gpu_campaign.CLIENT_JUDGES:
judge-clients, judge-warm) the same per client, with whether each reset the prefix cache between a
launch's runs.
The targets: tune's confirmed pick at least as good as the sweep's (the interval of the ratio
contains or exceeds 1) in at most 40 % of the sweep's wall-clock, the sweep's counted as one
uninterrupted sweep (its launches stopped by the end of a stay and its resumed start-ups left out;
tune's own interrupted steps count against tune).

    mkdir -p /tmp/camp && tar -xzf .gpu-state/campaign.tar.gz -C /tmp/camp
    PYTHONPATH=. .venv/bin/python benchmarks/gpu_head_to_head.py --campaign /tmp/camp/campaign \\
        --study .gpu-state/h2h-prior.tar.gz --study .gpu-state/h2h-noprior.tar.gz \\
        --out benchmarks/data/h2h-h200.json [--plot docs/img/h2h-h200.png]   # the plot: matplotlib
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import tempfile
from datetime import datetime
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import gpu_campaign as gc
from benchmarks import gpu_judge as gj
from benchmarks.gpu_vllm_sweep import convert, read_json
from benchmarks.vs_vllm_sweep import bootstrap_median_ci, bootstrap_ratio_ci

WALL_TARGET = 0.40


def active(intervals: list[tuple[float, float]], t: float) -> float:
    """Seconds of ``intervals`` before ``t``: a tool's own wall-clock at the moment ``t``."""
    return sum(max(0.0, min(end, t) - start) for start, end in intervals)


def sweep_side(campaign: Path, grid: dict) -> dict:
    """The sweep's row, from ``grid`` (its state as convert reads it)."""
    intervals = [(i["start"], i["end"]) for i in grid["meta"]["invocations"]]
    results, timeline, top, ends = [], [], None, []
    for p in grid["points"]:   # a config stopped at the end of a stay and relaunched: all its runs
        ok = [launch for launch in p["launches"] if launch["ok"]]
        if not any(launch["complete"] for launch in ok):
            continue
        runs = [r for launch in ok for r in launch["full"]]
        values = [r["value"] for r in runs]
        end = max(datetime.fromisoformat(launch["started"]).timestamp() + launch["timings"]["total_s"]
                  for launch in ok)
        results.append({"params": p["params"], "sweep": p["sweep"], "values": values,
                        "mean": statistics.fmean(values),
                        "cv": statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None,
                        "ready_s": [launch["timings"]["ready_s"] for launch in ok],
                        "launch_s": [launch["timings"]["total_s"] for launch in ok],
                        "bench_s": statistics.fmean(r["seconds"] for r in runs),
                        "run_s": statistics.fmean(r["peer_s"] for r in runs)})
        ends.append((end, statistics.fmean(values)))
    for end, value in sorted(ends):
        if top is None or value > top:
            top = value
            timeline.append([round(active(intervals, end), 1), value])
    pick = gj.sweep_pick(campaign) if results else None   # the config the judge launches for it
    return {"tool": "vllm bench sweep serve", "wall_s": grid["meta"]["peer_wall_s"],
            "stay_overhead_s": grid["meta"]["stay_overhead_s"],
            # one uninterrupted sweep: less what it cost only because it ran across stays
            "wall_whole_s": grid["meta"]["peer_wall_s"] - grid["meta"]["stay_overhead_s"],
            "launches": sum(len(p["launches"]) for p in grid["points"]) + len(grid["meta"]["aborted_launches"]),
            "refused_launched": len(grid["meta"]["refused"]), "configs_measured": len(results),
            "configs_planned": len(json.loads((campaign / "vllm-sweep" / "plan.json").read_text())["configs"]),
            "pick": pick and pick["sweep"], "pick_value": pick and pick["value"],
            "results": results, "timeline": timeline}


def finished_trials(archive: Path) -> list:
    """The finished trials of a `tune export`, read from a scratch copy."""
    import optuna

    from tuner.record.transfer import import_study

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        name, url = import_study(archive, lambda n: f"sqlite:///{tmp}/{n}.db")
        return [t for t in optuna.load_study(study_name=name, storage=url).get_trials(deepcopy=False)
                if t.datetime_complete is not None]


def tune_side(campaign: Path, trials: list, variant: str) -> list[dict]:
    """One row per budget the campaign has finished for this variant (``trials``: its study's
    finished trials)."""
    from tuner.record import schema

    record = json.loads((campaign / "steps.json").read_text())
    rows, steps_so_far = [], []
    for budget in gc.BUDGETS:
        steps = [f"{variant}-{budget}", f"{variant}-{budget}-confirm"]
        if not all(record.get(s, {}).get("done") for s in steps):
            break
        steps_so_far += steps
        intervals = [(r["start"], r["end"]) for s in steps_so_far for r in record[s]["runs"]]
        until = max(end for _, end in intervals)
        mine = sorted((t for t in trials if t.datetime_complete.timestamp() <= until),
                      key=lambda t: t.datetime_complete)
        launched = [t for t in mine if schema.launched(t)]
        timeline, top = [], None
        for t in launched:
            if schema.is_feasible(t) and t.user_attrs.get(schema.REPEAT_OF) is None and (
                    top is None or t.value > top):
                top = t.value
                timeline.append([round(active(intervals, t.datetime_complete.timestamp()), 1), t.value])
        pick = json.loads((campaign / "picks" / f"{variant}-{budget}.json").read_text())
        rows.append({"tool": f"tune {variant} {budget} %", "variant": variant, "budget": budget,
                     "wall_s": round(sum(end - start for start, end in intervals), 1),
                     "launches": len(launched),
                     "refused_launched": sum(1 for t in launched if t.user_attrs.get(schema.FAILURE_CLASS)),
                     "pruned_by_rule": sum(1 for t in mine if schema.PRUNED_RULE in t.user_attrs),
                     "pick_arm": pick["arm"], "pick": pick["params"], "pick_value": pick["median"],
                     "pick_n": pick["n"], "timeline": timeline})
    return rows


def judging_machine(launches: list[dict]) -> str | None:
    """The machine that measured the most launches (the latest on a tie): the judge's
    interleaving holds within one machine, and each stay gets a fresh one (gpu_judge.py)."""
    def weight(machine: str | None) -> tuple[int, float]:
        rows = [r for r in launches if r.get("machine") == machine]
        return sum("value" in r for r in rows), max(r.get("ended", 0) for r in rows)

    return max({r.get("machine") for r in launches}, key=weight, default=None)


def drift_adjusted(launches: list[dict]) -> tuple[dict[str, float], float] | None:
    """Each arm's ratio to the sweep's arm with the machine's drift taken out, and that drift per
    launch: least squares of log(value) on the arm and the launch's place in the sequence (failed
    launches take their place too). The ratios of a schedule that launches the arms in the same order
    every round carry the drift between their slots; this is how much. None when the launches do not
    determine it (one round)."""
    import numpy as np

    rows = [(k, r["arm"], r["value"]) for k, r in enumerate(launches) if "value" in r]
    labels = list(dict.fromkeys(arm for _, arm, _ in rows))
    if gj.SWEEP not in labels or len(rows) < len(labels) + 2:
        return None
    x = np.array([[float(arm == label) for label in labels] + [k] for k, arm, _ in rows])
    if np.linalg.matrix_rank(x) < x.shape[1]:
        return None
    coef, *_ = np.linalg.lstsq(x, np.log([v for *_, v in rows]), rcond=None)
    sweep = coef[labels.index(gj.SWEEP)]
    return ({label: math.exp(c - sweep) for label, c in zip(labels, coef[:-1])},
            math.expm1(coef[-1]))


def by_client(launches: list[dict], client: str) -> list[dict]:
    """The launches as one client measured them: ``value`` its objective (a one-client judge's
    rows carry `vllm bench serve`'s only); a launch it did not measure keeps its place, valueless."""
    out = []
    for r in launches:
        value = (r["by_client"].get(client, {}).get("value") if "by_client" in r
                 else r.get("value") if client == "vllm" else None)
        out.append({k: v for k, v in r.items() if k not in ("value", "by_client")}
                   | ({"value": value} if value is not None else {}))
    return out


def judged(campaign: Path, name: str = "judge", client: str = "vllm") -> dict:
    """Each arm's launches as ``client`` measured them, median with its interval, and ratio to
    the sweep's arm; launches of another machine are counted, not judged."""
    doc = json.loads((campaign / f"{name}.json").read_text())
    machine = judging_machine(doc["launches"])
    doc["launches"] = by_client(doc["launches"], client)
    launches = [r for r in doc["launches"] if r.get("machine") == machine]
    values = {label: [r["value"] for r in launches if r["arm"] == label and "value" in r]
              for label in doc["arms"]}
    ref = values[gj.SWEEP]
    adjusted, drift = drift_adjusted(launches) or ({}, None)
    out = {}
    for label, vs in values.items():
        out[label] = {"config": doc["arms"][label], "values": vs,
                      "median": statistics.median(vs) if vs else None,
                      "median_ci95": bootstrap_median_ci(vs),
                      "ratio_to_sweep": statistics.median(vs) / statistics.median(ref) if vs and ref else None,
                      "ratio_ci95": bootstrap_ratio_ci(vs, ref),
                      "ratio_drift_adjusted": adjusted.get(label), "drift_per_launch": drift,
                      "failed_launches": sum(1 for r in launches if r["arm"] == label and "error" in r),
                      "other_machines": [r.get("value") for r in doc["launches"]
                                         if r["arm"] == label and r.get("machine") != machine]}
    return out


def cache_reset(campaign: Path, name: str) -> bool:
    """Whether the judge reset the prefix cache between the runs of each launch: a judgement made
    before gpu_judge.py did (judge-clients) records no resets, and its runs after the first
    measured a replay of cached prompts."""
    launches = json.loads((campaign / f"{name}.json").read_text())["launches"]
    return bool(launches) and all("cache_resets" in r for r in launches if "error" not in r)


def arm_of(pick: dict | None, arm: str, judge: dict, configs: list[dict]) -> str | None:
    """The judge's arm that measured this pick (equal configs share one arm; the plan's configs
    pair each config's knobs with its sweep overrides)."""
    if not gj.names_a_config(arm):
        return gj.DEFAULTS
    for label, j in judge.items():
        knobs = next((c["knobs"] for c in configs if c["sweep"] == j["config"]), None)
        if knobs is not None and pick is not None and all(pick.get(k) == v for k, v in knobs.items()):
            return label
    return None


def meets_quality(ci95: list[float] | None) -> bool | None:
    """The quality target: the ratio's interval contains or exceeds 1 (None: not judged)."""
    return None if not ci95 else ci95[1] >= 1.0


def _spread(values: list[float]) -> dict | None:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "n": len(values)} if values else None


def first_runs(grid: dict) -> dict:
    """How the sweep's first run in a launch compares with that launch's runs 2 and 3, by
    quantization: the deficit 1 - run 1 / mean(runs 2, 3) and each run's mean TTFT. The judge
    measures only first runs, and tune's client one run per launch."""
    out: dict[str, dict] = {}
    for p in grid["points"]:
        for launch in (x for x in p["launches"] if x["ok"]):
            runs = {r["run"]: r for r in launch["full"]}
            if not {0, 1, 2} <= runs.keys():
                continue
            rest = [runs[1], runs[2]]
            side = out.setdefault(p["params"]["quantization"], {"deficit": [], "ttft_first_ms": [], "ttft_rest_ms": []})
            side["deficit"].append(1 - runs[0]["value"] / statistics.fmean(r["value"] for r in rest))
            side["ttft_first_ms"].append(runs[0]["metrics"]["mean_ttft_ms"])
            side["ttft_rest_ms"].extend(r["metrics"]["mean_ttft_ms"] for r in rest)
    return {q: {k: _spread(v) for k, v in side.items()} for q, side in out.items()}


def near_ties(campaign: Path, grid: dict, studies_trials: list) -> list[dict]:
    """The judged configs as each tool measured them, each with its mean TTFT: tune's client, one
    run per launch (every launch of the exported studies, ``studies_trials``); the sweep (``grid``,
    as convert reads it), runs 1, 2, 3 of a launch; the judge, one run per launch. The picks are
    within 2 % of each other, and which is fastest turns on how a launch is measured."""
    from tuner.record import schema

    doc = json.loads((campaign / "judge.json").read_text())
    machine = judging_machine(doc["launches"])
    configs = json.loads((campaign / "vllm-sweep" / "plan.json").read_text())["configs"]
    trials = [t for t in studies_trials
              if schema.launched(t) and t.values is not None and schema.is_feasible(t)]
    rows = []
    for label, config in doc["arms"].items():
        if config is None:
            continue
        knobs = next(c["knobs"] for c in configs if c["sweep"] == config)
        mine = [t for t in trials if all(t.params.get(k) == v for k, v in knobs.items())]
        launches = [sorted(launch["full"], key=lambda r: r["run"])
                    for p in grid["points"] if p["sweep"] == config
                    for launch in p["launches"] if launch["ok"]]
        judge = [r for r in doc["launches"] if r["arm"] == label and r.get("machine") == machine
                 and "value" in r]
        rows.append({"arm": label, "config": config, "params": knobs,
                     "tune": {"values": [t.value for t in mine],
                              "median": statistics.median(t.value for t in mine) if mine else None,
                              "ttft_ms": _spread([t.user_attrs["mean_ttft_ms"] for t in mine])},
                     "sweep": {"runs": [[r["value"] for r in runs] for runs in launches],
                               "ttft_ms": [[r["metrics"]["mean_ttft_ms"] for r in runs] for runs in launches],
                               "warm_mean": statistics.fmean(r["value"] for runs in launches for r in runs[1:])
                               if any(len(runs) > 1 for runs in launches) else None},
                     "judge": {"values": [r["value"] for r in judge],
                               "ttft_ms": _spread([r["mean_ttft_ms"] for r in judge])}})
    return rows


def report(campaign: Path, studies: dict[str, Path]) -> dict:
    grid = convert(campaign / "vllm-sweep")
    sweep = sweep_side(campaign, grid)
    trials = {variant: finished_trials(archive) for variant, archive in studies.items()}   # one import each
    tools = [t for variant, mine in trials.items() for t in tune_side(campaign, mine, variant)]
    has_judge = (campaign / "judge.json").exists()
    judge = judged(campaign) if has_judge else {}
    configs = json.loads((campaign / "vllm-sweep" / "plan.json").read_text())["configs"]
    for t in tools:
        t["judge_arm"] = arm_of(t["pick"], t["pick_arm"], judge, configs) if judge else None
        j = judge.get(t["judge_arm"] or "", {})
        t["ratio_to_sweep"], t["ratio_ci95"] = j.get("ratio_to_sweep"), j.get("ratio_ci95")
        t["ratio_drift_adjusted"] = j.get("ratio_drift_adjusted")
        whole = sweep["wall_whole_s"]
        t["wall_share_of_sweep"] = t["wall_s"] / whole if whole > 0 else None
        t["meets_quality"] = meets_quality(t["ratio_ci95"])
        t["meets_wall"] = None if t["wall_share_of_sweep"] is None else t["wall_share_of_sweep"] <= WALL_TARGET
    # the later judges, each launch measured by both clients (gpu_judge.py --clients vllm,tune)
    client_judges = {name: {"cache_reset": cache_reset(campaign, name),
                            "clients": {c: judged(campaign, name, c) for c in gj.CLIENTS}}
                     for name in gc.CLIENT_JUDGES if (campaign / f"{name}.json").exists()}
    for t in tools:
        t["client_judges"] = {}
        for name, cj in client_judges.items():
            t["client_judges"][name] = {}
            for c, jc in cj["clients"].items():
                j = jc.get(arm_of(t["pick"], t["pick_arm"], jc, configs) or "", {})
                t["client_judges"][name][c] = {
                    "ratio_to_sweep": j.get("ratio_to_sweep"), "ratio_ci95": j.get("ratio_ci95"),
                    "ratio_drift_adjusted": j.get("ratio_drift_adjusted"),
                    "meets_quality": meets_quality(j.get("ratio_ci95"))}
    return {"sweep": sweep, "tune": tools, "judge": judge, "client_judges": client_judges,
            "near_ties": near_ties(campaign, grid, [t for mine in trials.values() for t in mine]) if has_judge else [],
            "first_runs": first_runs(grid),
            "fidelity": read_json(campaign / "fidelity-h200.json", None),
            "fidelity_paced": read_json(campaign / "fidelity-h200-paced.json", None),
            "campaign": json.loads((campaign / "steps.json").read_text())}


def sweep_table(data: dict) -> str:
    """The sweep's configs as measured: ready time, its runs, their mean and CV, the launch's
    total, and each run's benchmark against its wall-clock in the sweep (the client's start-up)."""
    lines = ["| config | ready (s) | runs (tok/s) | mean | CV | launch (s) | benchmark / run in the sweep (s) |",
             "|---|---|---|---|---|---|---|"]
    for r in data["sweep"]["results"]:
        cv = f"{100 * r['cv']:.1f} %" if r["cv"] is not None else "-"
        lines.append(f"| {r['params']} | {', '.join(f'{x:.0f}' for x in r['ready_s'])} | "
                     f"{', '.join(f'{v:,.0f}' for v in r['values'])} | {r['mean']:,.0f} | {cv} | "
                     f"{', '.join(f'{x:.0f}' for x in r['launch_s'])} | {r['bench_s']:.1f} / {r['run_s']:.1f} |")
    return "\n".join(lines)


def ratio_cell(judged_pick: dict, missing: str) -> str:
    """A judged ratio as the tables show it: the ratio, its interval, the drift-adjusted ratio."""
    if not judged_pick.get("ratio_to_sweep"):
        return missing
    ci = "[{:.3f}, {:.3f}]".format(*judged_pick["ratio_ci95"]) if judged_pick.get("ratio_ci95") else "-"
    adjusted = judged_pick.get("ratio_drift_adjusted")
    return f"{judged_pick['ratio_to_sweep']:.3f} {ci}" + (f"; {adjusted:.3f}" if adjusted else "")


def table(data: dict) -> str:
    s = data["sweep"]
    lines = ["| tool | wall-clock | launches | refused launched | recommends | its value | judged ratio to the sweep's pick [95 %]; drift-adjusted | targets |",
             "|---|---|---|---|---|---|---|---|",
             f"| {s['tool']} ({s['configs_measured']} of {s['configs_planned']} configs) | {s['wall_s'] / 60:.1f} min "
             f"({s['wall_whole_s'] / 60:.1f} without the stays' restarts) | "
             f"{s['launches']} | {s['refused_launched']} | {s['pick']} | {s['pick_value'] or 0:,.0f} | 1 | |"]
    for t in data["tune"]:
        ratio = ratio_cell(t, "not judged yet")
        share = f" ({100 * t['wall_share_of_sweep']:.0f} %)" if t["wall_share_of_sweep"] else ""
        targets = ", ".join(f"{k.split('_')[1]} {'met' if v else 'missed'}"
                            for k, v in (("meets_quality", t["meets_quality"]), ("meets_wall", t["meets_wall"]))
                            if v is not None)
        pick = t["pick"] if gj.names_a_config(t["pick_arm"]) else "the defaults"
        lines.append(f"| {t['tool']} | {t['wall_s'] / 60:.1f} min{share} | {t['launches']} | "
                     f"{t['refused_launched']} | {pick} | {t['pick_value'] or 0:,.0f} (n={t['pick_n']}) | {ratio} | {targets} |")
    return "\n".join(lines)


def clients_table(data: dict) -> str:
    """The later judges: each tune run's pick against the sweep's, as each client measured them,
    one row per judge and tool."""
    if not data.get("client_judges"):
        return ""
    lines = ["| judge (prefix cache between runs) | tool | " + " | ".join(
        f"ratio by `{'vllm bench serve' if c == 'vllm' else 'tune bench'}` [95 %]; drift-adjusted"
        for c in gj.CLIENTS) + " |", "|---|---|" + "---|" * len(gj.CLIENTS)]
    for name, cj in data["client_judges"].items():
        cache = "reset" if cj["cache_reset"] else "kept"
        for t in data["tune"]:
            cells = [ratio_cell(t["client_judges"].get(name, {}).get(c, {}), "-") for c in gj.CLIENTS]
            lines.append(f"| {name} ({cache}) | {t['tool']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def near_ties_table(data: dict) -> str:
    """The judged configs as each tool measured them, and the sweep's first runs against its
    runs 2 and 3 by quantization."""
    if not data.get("near_ties"):
        return ""

    def values(vs: list[float]) -> str:
        return ", ".join(f"{v:,.0f}" for v in vs)

    def ttft(spread: dict | None) -> str:
        return f"{spread['min']:,.0f}-{spread['max']:,.0f}" if spread else "-"

    lines = ["| config | tune's client, a run per launch: median | its TTFT (ms) | sweep: runs 1 / 2 / 3 of a launch "
             "| runs 2-3 mean | judge: a run per launch | its TTFT (ms) |", "|---|---|---|---|---|---|---|"]
    for r in data["near_ties"]:
        c, t, sw, j = r["params"], r["tune"], r["sweep"], r["judge"]
        name = f"{c['quantization']} / KV {c['kv_cache_dtype']} / {c['max_num_seqs']} / {c['max_num_tokens']} ({r['arm']})"
        lines.append(f"| {name} | {values(t['values'])}: {t['median'] or 0:,.0f} | {ttft(t['ttft_ms'])} | "
                     f"{'; '.join(' / '.join(f'{v:,.0f}' for v in runs) for runs in sw['runs'])} | "
                     f"{sw['warm_mean'] or 0:,.0f} | {values(j['values'])} | {ttft(j['ttft_ms'])} |")
    lines += ["", "| quantization | launches | run 1 below runs 2-3: median [min, max] | TTFT run 1 (ms) | TTFT runs 2-3 (ms) |",
              "|---|---|---|---|---|"]
    for q, f in data["first_runs"].items():
        d = f["deficit"]
        lines.append(f"| {q} | {d['n']} | {100 * d['median']:.1f} % [{100 * d['min']:.1f}, {100 * d['max']:.1f}] | "
                     f"{ttft(f['ttft_first_ms'])} | {ttft(f['ttft_rest_ms'])} |")
    return "\n".join(lines)


def plot(data: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for i, run in enumerate([data["sweep"], *data["tune"]]):
        if not run["timeline"]:
            continue
        xs = [p[0] / 60 for p in run["timeline"]] + [run["wall_s"] / 60]
        ys = [p[1] for p in run["timeline"]] + [run["timeline"][-1][1]]
        # A 50 % run continues its 25 % one along the same path: the shorter drawn on top, and a
        # dot where each run ends, so both show.
        ax.step(xs, ys, where="post", color=f"C{i}", label=run["tool"], zorder=3 - run["wall_s"] / 1e5)
        ax.plot(xs[-1], ys[-1], "o", color=f"C{i}", zorder=3)
    ax.set_xlabel("the tool's own wall-clock (min; gaps between stays left out)")
    ax.set_ylabel("total token throughput, best so far (tok/s)")
    ax.set_title("H200, Qwen3-14B shape, vLLM 0.25.1: best so far vs wall-clock")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--campaign", type=Path, required=True, help="the unpacked campaign state")
    ap.add_argument("--study", type=Path, action="append", default=[],
                    help="a `tune export` of h2h-prior or h2h-noprior (repeatable)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--plot", type=Path, default=None)
    args = ap.parse_args(argv)
    studies = {}
    for archive in args.study:
        variant = archive.name.split(".")[0].removeprefix("h2h-")
        if variant not in gc.VARIANTS:
            ap.error(f"--study {archive}: expected an export named h2h-{{{','.join(gc.VARIANTS)}}}.tar.gz")
        studies[variant] = archive
    data = report(args.campaign, studies)
    args.out.write_text(json.dumps(data, indent=1) + "\n")
    print(sweep_table(data) + "\n")
    print(table(data))
    if data["client_judges"]:
        print("\n" + clients_table(data))
    if data["near_ties"]:
        print("\n" + near_ties_table(data))
    if args.plot:
        plot(data, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
