"""The performance model against measurements: for each measured config of a study, the prediction
the tuner's estimator makes for it, and per engine the bias (geometric mean of measured/predicted),
the spread sigma of log(measured/predicted) and Spearman's rho between the two, overall and within
each quantization (``within_quantization``: whether the model orders the batching knobs once the
quantization is settled; the last table printed). ``--estimator`` names any estimator of the registry,
so two estimators are compared by running it twice on the same archives.

Predictions run here, on the CPU machine (aiconfigurator-core is not carried to the GPU host); the
space is the one stored in the study, its model a local folder with the same config.json (the
script writes the published shape there when it is missing).

Repeats of one config (``tune confirm``) are one row, measured as their median: sigma is the spread
between configs, not between launches. ``--grid`` adds a measured grid (the peer's sweep on the
H200, benchmarks/gpu_vllm_sweep.py convert), its runs of a config one row likewise; the gap is
given over everything and per source.

    PYTHONPATH=. .venv/bin/python benchmarks/calibrate.py docs/results/h200-engines.tar.gz \\
        docs/results/h200-vllm.tar.gz docs/results/h200-engines-prior.tar.gz \\
        benchmarks/data/h200-h2h/h2h-prior.tar.gz benchmarks/data/h200-h2h/h2h-noprior.tar.gz \\
        benchmarks/data/h200-sglang-grid.tar.gz \\
        --grid benchmarks/data/grid-vllm-h200.json --gpu h200-141gb \\
        --out benchmarks/data/reality-gap-h200.json      # the gap benchmarks/replay_gpu.py reads; ~2 min
    .venv/bin/python benchmarks/calibrate.py --grid benchmarks/data/grid-vllm-h200.json --gpu h200-141gb \
        --out benchmarks/data/reality-gap-h200-sweep.json
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
from pathlib import Path

from tuner.configs.predict import objective_value, predict
from tuner.engines.hardware import profile
from tuner.estimate import get_estimator
from tuner.record import schema
from tuner.record.transfer import import_study
from tuner.space import load_space
from tuner.study import lifecycle
from tuner.study.prior import spearman


def measured_configs(handle: lifecycle.StudyHandle) -> list[dict]:
    """Launched, measured configs: engine, the knobs it was launched with, the objective value of
    each launch (trials in launch order) and their median."""
    rows: dict[tuple, dict] = {}
    for t in handle.study.trials:
        if t.state.name != "COMPLETE" or not t.user_attrs.get(schema.FEASIBLE) or t.value is None:
            continue
        if schema.REUSED_FROM in t.user_attrs:
            continue
        knobs = dict(t.user_attrs.get(schema.KNOBS) or {})
        engine = t.params.get("engine") or next(iter(handle.space.engines))
        row = rows.setdefault((engine, json.dumps(knobs, sort_keys=True)), {
            "study": handle.name, "trials": [], "arm": t.user_attrs.get(schema.ARM, "search"),
            "engine": engine, "knobs": knobs, "runs": []})
        row["trials"].append(t.number)
        row["runs"].append(float(t.value))
    for row in rows.values():
        row["measured"] = statistics.median(row["runs"])
    return list(rows.values())


def grid_configs(path: Path) -> tuple[str, list[dict]]:
    """A measured grid's configs (benchmarks/gpu_vllm_sweep.py convert: `vllm bench sweep serve`'s
    own runs): the space it launched, and per config every run of its launches that started, as
    one row measured as their median."""
    doc = json.loads(path.read_text())
    meta, rows = doc["meta"], []
    for point in doc["points"]:
        runs = [r["value"] for launch in point["launches"] if launch["ok"] for r in launch["full"]]
        if runs:
            rows.append({"study": f"sweep:{path.stem}", "trials": [], "arm": "search",
                         "engine": meta["engine"], "knobs": dict(point["launched_with"]),
                         "runs": runs, "measured": statistics.median(runs)})
    return meta["launch_space"], rows


def ensure_shape(model: Path) -> None:
    """The H200 spaces' model folder with the published Qwen3-14B config.json, when missing here."""
    if not (model / "config.json").exists():
        from tuner import tiny_model
        from tuner.engines.model_config import published_shape
        tiny_model.build(model, config=tiny_model.with_local_tokenizer(published_shape("Qwen/Qwen3-14B")))


def with_predictions(rows: list[dict], space, estimator, hardware) -> list[dict]:
    """Each measured row with the model's prediction for its engine and knobs, or why none."""
    for r in rows:
        est = predict(estimator, space, r["engine"], r["knobs"], hardware)
        r.update(predicted=objective_value(est, space.objective.metric), unsupported=est.unsupported,
                 notes=list(est.notes), quantization=quantization(space, r["engine"], r["knobs"]))
    return rows


def quantization(space, engine: str, knobs: dict) -> str:
    """The weights a config ran with: its quantization knob, else the space's default for it (an
    engine's defaults run BF16 weights unless the space says otherwise)."""
    if "quantization" in knobs:
        return str(knobs["quantization"])
    param = space.engines[engine].params.get("quantization")
    return str(param.default) if param is not None and param.default is not None else "none"


def within_quantization(rows: list[dict]) -> dict:
    """Per engine and quantization: Spearman's rho of predicted against measured over the configs
    that got a prediction. Across quantizations the model's rho is mostly the FP8 step; within one
    it is whether the model orders the batching knobs, which is what the prior must get right once
    the quantization is settled. Fewer than 3 configs: no rho."""
    out: dict[str, dict] = {}
    for engine, quant in sorted({(r["engine"], r["quantization"]) for r in rows}):
        have = [r for r in rows if r["engine"] == engine and r["quantization"] == quant and r["predicted"]]
        out.setdefault(engine, {})[quant] = {
            "n": len(have),
            "distinct_predictions": len({r["predicted"] for r in have}),
            "spearman_rho": (spearman([r["predicted"] for r in have], [r["measured"] for r in have])
                             if len(have) > 2 else None),
        }
    return out


def fp8_step(rows: list[dict]) -> dict | None:
    """Online FP8's step over BF16 weights, measured and predicted: the geometric mean of the FP8
    configs over that of the BF16 ones. The gain the search is after is this step, so a model can
    have the right order within each half and still misjudge how much FP8 buys."""
    halves = {q: [r for r in rows if r["knobs"].get("quantization") == q] for q in ("fp8", "none")}
    if not all(halves.values()):
        return None
    gm = lambda key, q: math.exp(statistics.fmean(math.log(r[key]) for r in halves[q]))
    return {"n_fp8": len(halves["fp8"]), "n_bf16": len(halves["none"]),
            **{key: gm(key, "fp8") / gm(key, "none") for key in ("measured", "predicted")}}


def gap(rows: list[dict]) -> dict:
    """Per engine: n, bias, sigma and rho over the configs that got a prediction, and online FP8's
    step where both halves were measured."""
    out = {}
    for engine in sorted({r["engine"] for r in rows}):
        have = [r for r in rows if r["engine"] == engine and r["predicted"]]
        logs = [math.log(r["measured"] / r["predicted"]) for r in have]
        out[engine] = {
            "n": len(have),
            "bias": math.exp(statistics.fmean(logs)) if logs else None,
            "sigma_log": statistics.stdev(logs) if len(logs) > 1 else None,
            "spearman_rho": (spearman([r["predicted"] for r in have], [r["measured"] for r in have])
                             if len(have) > 2 else None),
            "fp8_step": fp8_step(have),
            "within_quantization": within_quantization(have).get(engine, {}),
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archives", type=Path, nargs="*", help="`tune export` archives")
    ap.add_argument("--grid", type=Path, action="append", default=[],
                    help="a measured grid (benchmarks/gpu_vllm_sweep.py convert), repeatable")
    ap.add_argument("--gpu", required=True, help="the hardware profile the study ran on (e.g. h200-141gb)")
    ap.add_argument("--estimator", default="aiconfigurator")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    estimator, hardware = get_estimator(args.estimator), profile(args.gpu)
    rows, names = [], []
    for archive in args.archives:
        with tempfile.TemporaryDirectory() as tmp:
            name, url = import_study(archive, lambda n: f"sqlite:///{tmp}/{n}.db")
            handle = lifecycle.load(name, url)
            names.append(name)
            ensure_shape(Path(handle.space.model.resolved_path()))
            rows += with_predictions(measured_configs(handle), handle.space, estimator, hardware)
    for path in args.grid:
        space_name, found = grid_configs(path)
        space = load_space(space_name)
        ensure_shape(Path(space.model.resolved_path()))
        names.append(f"sweep:{path.stem}")
        rows += with_predictions(found, space, estimator, hardware)
    if not rows:
        ap.error("no measured config: give `tune export` archives or --grid files")
    doc = {"studies": names, "gpu": args.gpu, "estimator": args.estimator, "configs": rows, "gap": gap(rows),
           "by_source": {n: gap([r for r in rows if r["study"] == n]) for n in names}}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print("| study | trials | arm | engine | knobs | measured (median) | predicted | measured/predicted |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = f"{r['measured'] / r['predicted']:.3f}" if r["predicted"] else r["unsupported"]
        knobs = ", ".join(f"{k}={v}" for k, v in r["knobs"].items()) or "(defaults)"
        pred = f"{r['predicted']:,.0f}" if r["predicted"] else "-"
        trials = ", ".join(map(str, r["trials"]))
        print(f"| {r['study']} | {trials} | {r['arm']} | {r['engine']} | {knobs} | {r['measured']:,.0f} | {pred} | {ratio} |")
    for source, by_engine in [("all", doc["gap"]), *doc["by_source"].items()]:
        for engine, g in by_engine.items():
            step = g["fp8_step"]
            step = f" fp8 step measured {step['measured']:.3f} predicted {step['predicted']:.3f}" if step else ""
            print(f"{source} {engine}: n={g['n']} bias={g['bias']} sigma_log={g['sigma_log']} "
                  f"rho={g['spearman_rho']}{step}")
    print(f"\nWithin engine x quantization ({args.estimator}, all sources):")
    print("| engine | quantization | n | distinct predictions | Spearman rho |")
    print("|---|---|---|---|---|")
    for engine, g in doc["gap"].items():
        for quant, w in g["within_quantization"].items():
            rho = f"{w['spearman_rho']:.2f}" if w["spearman_rho"] is not None else "- (n < 3)"
            print(f"| {engine} | {quant} | {w['n']} | {w['distinct_predictions']} | {rho} |")


if __name__ == "__main__":
    main()
