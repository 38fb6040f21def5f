"""Search strategies replayed on a grid measured on the GPU (issue 22, item 4).

The grid is measured, not simulated: each point's launches are real launches with their real costs
(launch to ready, benchmark, teardown) and values, and the noise a replayed trial draws is the
spread of the measured repeats (the peer's 3 runs per launch in the sweep's grid). Each strategy is
a live study, as in benchmarks/replay_gpu.py: ``tuner.study.run`` with the replay executor, the
recorder judging rules for the H200, the engines' defaults queued as baselines, and for the prior
arms the model's predictions queued and fed to the prior sampler as ``tune start`` does.

Strategies: greedy (the control: each engine at its defaults, then one knob at a time), grid (every
config, in the grid sampler's seeded random order), random, TPE, and TPE with the performance
model's prior, calibrated (each prediction times its engine's measured bias, from
benchmarks/data/reality-gap-h200.json) and raw. The predictions are the model's for each point's
own launched knobs, made here (aiconfigurator) once and kept beside the grid
(``<grid>-predictions.json``), so the replay runs without the model.

Grids: ``grid-vllm-h200.json`` (benchmarks/gpu_vllm_sweep.py convert: the peer's grid) and
``grid-h200-slice.json``, a SLICE of real measurements until that grid exists: the five configs
that `tune start --space h200-engines` measured on the H200 (docs/results/h200-engines.tar.gz),
one launch and one benchmark each, keyed by the knobs that tell them apart (``slice``); and any
exported study of a ``sampler: grid`` space (``from-study``, benchmarks/study_grid.py), such as
``grid-sglang-h200.json`` from `tune start --space h200-sglang-grid`.

    PYTHONPATH=. .venv/bin/python benchmarks/replay_measured.py slice    # -> grid-h200-slice.json
    PYTHONPATH=. .venv/bin/python benchmarks/replay_measured.py from-study ARCHIVE --out G
    PYTHONPATH=. .venv/bin/python benchmarks/replay_measured.py restrict --grid G --fix KNOB=VALUE --out G2
    PYTHONPATH=. .venv/bin/python benchmarks/replay_measured.py predict --grid G   # needs aiconfigurator
    PYTHONPATH=. .venv/bin/python benchmarks/replay_measured.py replay --grid G [--seeds 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import warnings
from datetime import datetime, timezone
from pathlib import Path

import optuna

from benchmarks.landscape import write_checkpoints
from benchmarks.replay import TOLERANCE, Run
from benchmarks.replay_gpu import _fmt, replay, summarize
from benchmarks.study_grid import grid_from_study, launch_of, proposable
from tuner.space import ENGINE_PARAM, Space
from tuner.errors import InputError
from tuner.files import read_text, write_atomic
from tuner.study.knowledge import PREDICTIONS_FORMAT, Knowledge, carried_predictions
from tuner.study.prior import Prediction
from tuner.study.replay import Grid

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DATA = HERE / "data"
SLICE = DATA / "grid-h200-slice.json"
GAP = DATA / "reality-gap-h200.json"
# name -> (sampler, prior: None | "calibrated" | "raw", multi-fidelity), as replay_gpu.STRATEGIES
STRATEGIES: dict[str, tuple[str, str | None, bool]] = {
    "greedy": ("greedy", None, False),
    "grid": ("grid", None, False),
    "random": ("random", None, False),
    "tpe": ("tpe", None, False),
    "tpe-prior": ("tpe", "calibrated", False),
    "tpe-prior-raw": ("tpe", "raw", False),
}
BUDGETS = (6, 10, 20)
# The slice's keys: the knobs that tell the five measured configs apart. vLLM's defaults and trial 3
# differ in gpu_memory_utilization alone among the searched knobs (0.92 and 0.84; trial 3 also had
# max_model_len 16384); its FP8-KV trial and each SGLang trial differ from their defaults in the KV
# dtype. gpu_memory_utilization is conditional on the KV dtype so that every config the replay space
# can propose is one that was measured.
SLICE_PARAMS = {
    "vllm": {"kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"], "default": "auto"},
             "gpu_memory_utilization": {"type": "categorical", "choices": [0.92, 0.84],
                                        "default": 0.92, "when": {"kv_cache_dtype": "auto"}}},
    "sglang": {"kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"], "default": "auto"}},
}


# ---- the slice: real trials of a tune study as a grid ------------------------------------------

def slice_from_study(archive: Path) -> dict:
    """The measured trials of an exported study, one point each, keyed by SLICE_PARAMS; refused
    unless the keys tell the trials apart and the slice space proposes exactly these configs."""
    from tuner.record import schema
    from tuner.record.transfer import import_study
    from tuner.study import lifecycle

    with tempfile.TemporaryDirectory() as tmp:
        name, url = import_study(archive, lambda n: f"sqlite:///{tmp}/{n}.db")
        handle = lifecycle.load(name, url)
        trials = [t for t in handle.study.trials if t.state.name == "COMPLETE"
                  and t.user_attrs.get(schema.FEASIBLE) and schema.REUSED_FROM not in t.user_attrs]
        stored = handle.space.model_dump(mode="json")
    points = []
    for t in trials:
        engine = t.params[ENGINE_PARAM]
        key = {ENGINE_PARAM: engine}
        for knob, p in SLICE_PARAMS[engine].items():
            if all(key.get(k) == v for k, v in p.get("when", {}).items()):
                key[knob] = round(t.params[knob], 4) if isinstance(t.params[knob], float) else t.params[knob]
        points.append({"params": key, "trial": t.number, "arm": t.user_attrs.get(schema.ARM),
                       "launched_with": t.user_attrs.get(schema.KNOBS), "launches": [launch_of(t)]})
    keys = [json.dumps(p["params"], sort_keys=True) for p in points]
    if len(set(keys)) != len(keys):
        raise SystemExit(f"the slice's keys do not tell the trials apart: {keys}")
    space = {**stored, "name": "h200-slice", "sampler": "tpe",
             "engines": {e: {**stored["engines"][e], "params": SLICE_PARAMS[e]} for e in SLICE_PARAMS},
             "baselines": [{"name": f"{e}-defaults", "engine": e} for e in SLICE_PARAMS]}
    proposed = proposable(Space.model_validate(space))
    if proposed != set(keys):
        raise SystemExit(f"the slice space proposes {sorted(proposed)}, the study measured {sorted(keys)}")
    return {"meta": {"what": "A SLICE, not a grid: the configs `tune start --space h200-engines` measured on "
                             "one H200 (docs/results/h200-engines.md), one launch and one benchmark each, keyed "
                             "by the knobs that tell them apart; each point's launched_with has its knobs",
                     "source": str(archive.resolve().relative_to(REPO)), "study": name,
                     "launch_space": handle.space.name, "model_shape": "Qwen3-14B",
                     "objective": handle.space.objective.metric,
                     "direction": handle.space.objective.direction, "gpu": "h200-141gb",
                     "space": space},
            "knobs": [ENGINE_PARAM, *dict.fromkeys(k for ps in SLICE_PARAMS.values() for k in ps)],
            "points": points}


# ---- a part of a grid ----------------------------------------------------------------------------

def restrict(doc: dict, fixed: dict[str, object]) -> dict:
    """The grid with some knobs fixed at one of their values: the points that have them, and a
    replay space whose fixed knobs offer only that value. A grid measured in part (a stay ended
    before its last config) replays on the part that is complete, and CI replays a small slice of
    the real grid. A value is one of the knob's choices or its text (as ``--fix`` gives it).
    Refused unless every config the smaller space proposes was measured."""
    space = json.loads(json.dumps(doc["meta"]["space"]))
    (engine,) = space["engines"]
    params = space["engines"][engine]["params"]
    fixed = dict(fixed)
    for knob, given in fixed.items():
        if knob not in params:
            raise InputError(f"--fix {knob}: not a knob of this grid (its knobs: {', '.join(params)})")
        value = next((c for c in params[knob]["choices"] if str(c) == str(given)), None)
        if value is None:
            raise InputError(f"--fix {knob}={given}: not one of its values {params[knob]['choices']}")
        fixed[knob] = value
        if params[knob]["default"] != value:
            space["baselines"] = []   # the engine's defaults are outside the part
        params[knob] = {**params[knob], "choices": [value], "default": value}
    tag = ",".join(f"{k}={v}" for k, v in fixed.items())
    space["name"] = "-".join([space["name"], *(f"{k}.{v}" for k, v in fixed.items())])
    points = [p for p in doc["points"] if all(p["params"].get(k) == v for k, v in fixed.items())]
    measured = {json.dumps(p["params"], sort_keys=True) for p in points}
    missing = proposable(Space.model_validate(space)) - measured
    if missing:
        raise InputError(f"the part {tag} of the grid lacks measured configs: {sorted(missing)}")
    return {"meta": {**doc["meta"], "space": space, "restricted": fixed,
                     "what": f"{doc['meta']['what']}; only its configs with {tag}"},
            "knobs": doc["knobs"], "points": points}


# ---- the model's predictions, made once ---------------------------------------------------------

def predictions_path(grid_file: Path) -> Path:
    return grid_file.with_name(grid_file.stem + "-predictions.json")


def predict_points(doc: dict, out: Path) -> Knowledge:
    """The model's prediction for each point's launched knobs in the space they were launched
    from, keyed by the point, saved as ``tune plan --save-prior`` saves a space's predictions
    (``carried_predictions`` reads it back, checked against the replay space)."""
    from tuner.configs.predict import objective_value, predict
    from tuner.engines.hardware import profile
    from tuner.estimate import get_estimator
    from tuner.space import load_space

    estimator, hardware = get_estimator("aiconfigurator"), profile(doc["meta"]["gpu"])
    with tempfile.TemporaryDirectory() as tmp:
        space = replay_space(doc, Path(tmp))
        launched = load_space(doc["meta"]["launch_space"])
        launched = launched.model_copy(update={"model": space.model})
        preds, unsupported = [], {}
        for p in doc["points"]:
            engine = p["params"].get(ENGINE_PARAM) or next(iter(space.engines))
            est = predict(estimator, launched, engine, p["launched_with"], hardware)
            value = objective_value(est, space.objective.metric)
            if value:
                preds.append(Prediction(dict(p["params"]), value, "model:aiconfigurator"))
            else:
                why = est.unsupported or "no number"
                unsupported[why] = unsupported.get(why, 0) + 1
    found = Knowledge(preds, [{"kind": "model", "estimator": "aiconfigurator", "gpu": hardware.name,
                               "predicted": len(preds), "unsupported": unsupported,
                               "made": datetime.now(timezone.utc).isoformat(timespec="seconds")}])
    write_atomic(out, json.dumps({"format": PREDICTIONS_FORMAT, "space": space.name,
                                  "metric": space.objective.metric, "engines": sorted(space.engines),
                                  **found.to_attr()}, indent=1) + "\n")
    return found


# ---- the replay ---------------------------------------------------------------------------------

def replay_space(doc: dict, shapes: Path) -> Space:
    """The grid's own replay space, its model the published shape (the rules read its facts)."""
    raw = dict(doc["meta"]["space"])
    raw["model"] = {**raw["model"], "path": write_checkpoints(shapes, doc["meta"]["model_shape"])["none"],
                    "tokenizer": None, "variants": {}}
    return Space.model_validate(raw)


def calibrated(found: Knowledge, bias: dict[str, float], space: Space) -> Knowledge:
    """Each prediction times its engine's measured bias (geometric mean of measured / predicted),
    and the model's pick the best of those; an empty ``bias``: the model's own numbers."""
    engine = next(iter(space.engines))
    preds = [Prediction(p.params, p.value * bias.get(p.params.get(ENGINE_PARAM, engine), 1.0),
                        p.source, p.origin) for p in found.predictions]
    best = max(preds, key=lambda p: p.value) if space.objective.direction == "maximize" else min(
        preds, key=lambda p: p.value)
    sources = [*found.sources, {"kind": "calibration", "bias": bias}] if bias else found.sources
    return Knowledge(preds, sources, Prediction(best.params, best.value, "model"))


def run_all(space: Space, grid: Grid, strategies: list[str], seeds: int, n_trials: int,
            priors: dict[str, Knowledge], gpu: str) -> dict[str, list[Run]]:
    runs: dict[str, list[Run]] = {}
    for name in strategies:
        prior = STRATEGIES[name][1]
        runs[name] = []
        for seed in range(seeds):
            r = replay(space, grid, name, seed, n_trials=n_trials, knowledge=priors.get(prior),
                       hardware_gpu=gpu, table=STRATEGIES)
            r.study = None
            runs[name].append(r)
    return runs


def markdown(summary: dict, grid: Grid, meta: dict) -> str:
    lines = [f"Grid: {meta['grid']} ({len(grid.points)} configs, optimum {grid.optimum:,.0f}); "
             f"{meta['seeds']} seeds per strategy, at most {meta['n_trials']} launches per study; "
             "rule-pruned and repeated proposals cost no launch (live tool).", "",
             "| strategy | reached 2 % | median launches to 2 % (IQR) | launches (mean) | engine-h per "
             "study | " + " | ".join(f"value at {b} launches" for b in BUDGETS) + " |",
             "|---|---|---|---|---|" + "---|" * len(BUDGETS)]
    for name, s in summary.items():
        iqr = s["reach_launches_p25_p75"]
        cells = [f"{100 * m:.1f} ± {100 * sd:.1f}" for m, sd in s["at_launches"].values()]
        lines.append(f"| {name} | {100 * s['reach_rate']:.0f} % | {_fmt(s['reach_launches_median'])} "
                     f"({_fmt(iqr[0], 0)}–{_fmt(iqr[1], 0)}) | {s['launches_mean']:.1f} | "
                     f"{s['engine_h_mean']:.2f} | " + " | ".join(cells) + " |")
    lines += ["", "Value: true value of the config `tune best` would report, % of the grid's optimum, "
              f"mean ± sd over seeds; within 2 % = at least {100 * (1 - TOLERANCE):.0f} %."]
    return "\n".join(lines) + "\n"


def replay_main(args: argparse.Namespace) -> int:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    doc = json.loads(args.grid.read_text())
    grid = Grid.from_json(doc)
    strategies = [s for s in args.strategies.split(",") if s]
    unknown = set(strategies) - set(STRATEGIES)
    if unknown:
        sys.exit(f"unknown strategies {sorted(unknown)}; choose from {', '.join(STRATEGIES)}")
    gap = json.loads(args.gap.read_text())["gap"]
    with tempfile.TemporaryDirectory(prefix="replay-measured-") as tmp:
        space = replay_space(doc, Path(tmp))
        priors = {}
        if any(STRATEGIES[s][1] for s in strategies):
            found = carried_predictions(space, args.predictions or predictions_path(args.grid))
            bias = {e: g["bias"] for e, g in gap.items() if g.get("bias")}
            priors = {"calibrated": calibrated(found, bias, space), "raw": calibrated(found, {}, space)}
        runs = run_all(space, grid, strategies, args.seeds, args.trials, priors, doc["meta"]["gpu"])
    summary = summarize(runs, runs.get("greedy"), budgets=BUDGETS)
    meta = {"grid": str(args.grid.resolve().relative_to(REPO)) if args.grid.resolve().is_relative_to(REPO)
            else str(args.grid), "seeds": args.seeds, "n_trials": args.trials,
            "bias": {e: g["bias"] for e, g in gap.items()}}
    md = markdown(summary, grid, meta)
    if args.out:
        args.out.write_text(json.dumps({"meta": meta, "optimum": grid.optimum,
                                        "optimum_params": grid.best_params, "summary": summary,
                                        "runs": {n: [{"seed": r.seed, "reach_launches": r.reach_launches(),
                                                      "final": round(r.final, 4), "launches": r.launches,
                                                      "seconds": round(r.seconds)} for r in rs]
                                                 for n, rs in runs.items()}}, indent=1))
        args.out.with_suffix(".md").write_text(md)
    print(md)
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("slice", help="the H200 study's measured trials as a grid")
    s.add_argument("--archive", type=Path, default=REPO / "docs" / "results" / "h200-engines.tar.gz")
    s.add_argument("--out", type=Path, default=SLICE)
    g = sub.add_parser("from-study", help="an exported grid-sampler study's launches as a grid")
    g.add_argument("archive", type=Path, help="`tune export` archive")
    g.add_argument("--out", type=Path, required=True)
    g.add_argument("--model-shape", default="Qwen3-14B", help="the published shape the rules read")
    g.add_argument("--gpu", default="h200-141gb", help="hardware profile the replay judges rules with")
    f = sub.add_parser("restrict", help="the part of a grid with some knobs fixed (KNOB=VALUE)")
    f.add_argument("--grid", type=Path, required=True)
    f.add_argument("--fix", action="append", required=True, metavar="KNOB=VALUE")
    f.add_argument("--out", type=Path, required=True)
    p = sub.add_parser("predict", help="the model's prediction for each point (needs aiconfigurator)")
    p.add_argument("--grid", type=Path, default=SLICE)
    r = sub.add_parser("replay")
    r.add_argument("--grid", type=Path, default=SLICE)
    r.add_argument("--predictions", type=Path, default=None, help="default: <grid>-predictions.json")
    r.add_argument("--gap", type=Path, default=GAP, help="per-engine bias (benchmarks/calibrate.py)")
    r.add_argument("--seeds", type=int, default=50)
    r.add_argument("--trials", type=int, default=max(BUDGETS), help="launches per study")
    r.add_argument("--strategies", default=",".join(STRATEGIES))
    r.add_argument("--out", type=Path, default=None, help="results JSON (and .md beside it)")
    args = ap.parse_args(argv)
    if args.cmd == "slice":
        doc = slice_from_study(args.archive)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"{len(doc['points'])} measured configs -> {args.out}")
        return 0
    if args.cmd == "from-study":
        doc = grid_from_study(args.archive, model_shape=args.model_shape, gpu=args.gpu)
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
        n = sum(len(p["launches"]) for p in doc["points"])
        refused = sum(not launch["ok"] for p in doc["points"] for launch in p["launches"])
        print(f"{len(doc['points'])} configs, {n} launches ({refused} refused) -> {args.out}")
        return 0
    if args.cmd == "restrict":
        fixed = {}
        for item in args.fix:
            knob, sep, value = item.partition("=")
            if not sep:
                ap.error(f"--fix {item}: expected KNOB=VALUE")
            fixed[knob] = value
        try:
            doc = restrict(json.loads(read_text(args.grid, "--grid")), fixed)
        except InputError as e:
            ap.error(str(e))
        except (ValueError, KeyError, TypeError) as e:
            ap.error(f"--grid {args.grid}: not a measured grid ({type(e).__name__}: {e})")
        write_atomic(args.out, json.dumps(doc, indent=1) + "\n")
        print(f"{len(doc['points'])} configs -> {args.out}")
        return 0
    if args.cmd == "predict":
        found = predict_points(json.loads(args.grid.read_text()), predictions_path(args.grid))
        print(f"{len(found.predictions)} predictions -> {predictions_path(args.grid)}")
        return 0
    return replay_main(args)


if __name__ == "__main__":
    sys.exit(main())
