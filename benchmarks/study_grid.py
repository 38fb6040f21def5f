"""An exported tune study of a grid-sampler space as a measured grid for the replay (issue 22,
items 2 and 4): the trials tune's own trial runner launched become the grid's launches, so the
replay (benchmarks/replay_measured.py) is charged what tune itself paid on the GPU.

Each config is one point keyed by the space's own searched params (ENGINE_PARAM too when the space
has several engines; a conditional param the config lacks is absent, None in the replay's key).
Every launch of a searched config is a launch of its point, `tune confirm`'s repeats included; a
launch the engine refused (or that died in its benchmark) is a refused launch charged its total
seconds, as benchmarks/gpu_vllm_sweep.py convert records the peer's refusals. Baseline arms
launch the engine's own defaults (their knobs' flags left out), which need not be any grid point
(SGLang computes max_running_requests from its KV pool), so their launches are kept in
``meta.baselines``, not mixed into a point; the replay answers a baseline arm from the point of its
recorded params. Configs a rule ruled out were never launched and are listed in ``meta.ruled_out``.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from optuna.trial import FrozenTrial, TrialState

from tuner.record import schema
from tuner.space import ENGINE_PARAM, Space
from tuner.space.suggest import grid_values

REPO = Path(__file__).resolve().parent.parent


def launch_of(t: FrozenTrial) -> dict:
    """One finished launch of a trial in the replay's grid format (tuner.study.replay.Grid)."""
    started = t.datetime_start.isoformat(timespec="seconds")
    timings = t.user_attrs[schema.TIMINGS]
    if not t.user_attrs.get(schema.FEASIBLE):
        evidence = t.user_attrs.get(schema.FAILURE_EVIDENCE) or ""
        return {"ok": False, "started": started, "time_to_fail_s": timings["total_s"],
                "failure_class": t.user_attrs.get(schema.FAILURE_CLASS),
                "error": [t.user_attrs.get(schema.FAILURE_REASON) or "",
                          *evidence.splitlines()[-12:]]}
    return {"ok": True, "started": started, "timings": timings,
            "full": [{"value": float(t.value), "seconds": timings["bench_s"],
                      "metrics": t.user_attrs.get(schema.METRICS) or {}}]}


def knobs_of(space: Space) -> list[str]:
    """The grid's key: the engine (when there are several), then every searched param."""
    engine = [ENGINE_PARAM] if len(space.engines) > 1 else []
    return [*engine, *dict.fromkeys(k for c in space.engines.values() for k in c.params)]


def proposable(space: Space) -> set[str]:
    """Every config the space can propose, as JSON keys: each engine's product of its params'
    grid values, a conditional param only where its condition holds."""
    found = set()
    for engine, choice in space.engines.items():
        combos = [{ENGINE_PARAM: engine}] if len(space.engines) > 1 else [{}]
        for knob, p in choice.params.items():
            values = grid_values(p)
            combos = [{**c, knob: v} if all(c.get(k) == w for k, w in p.when.items()) else c
                      for c in combos for v in values]
        found |= {json.dumps(c, sort_keys=True) for c in combos}
    return found


def grid_from_study(archive: Path, *, model_shape: str, gpu: str) -> dict:
    """The measured grid of an exported grid-sampler study; refused unless every config the
    space proposes was launched or ruled out. ``model_shape`` and ``gpu`` name the published
    shape and the hardware profile the replay judges rules with (the study stores neither name)."""
    from tuner.record.transfer import import_study
    from tuner.study import lifecycle

    with tempfile.TemporaryDirectory() as tmp:
        name, url = import_study(archive, lambda n: f"sqlite:///{tmp}/{n}.db")
        handle = lifecycle.load(name, url)
        trials = sorted(handle.study.get_trials(deepcopy=False), key=lambda t: t.number)
    space = handle.space
    if space.sampler != "grid":
        raise SystemExit(f"study {name!r}: its space samples with {space.sampler!r}, not grid")
    if space.fidelity is not None:
        raise SystemExit(f"study {name!r} screens (fidelity): its bench_s does not split screen from full")
    knobs = knobs_of(space)
    points: dict[str, dict] = {}
    baselines: dict[str, list] = {}
    ruled_out, interrupted = [], []
    for t in trials:
        key = {k: t.params[k] for k in knobs if k in t.params}
        if schema.PRUNED_RULE in t.user_attrs:
            ruled_out.append({"params": key, "trial": t.number, "rule": t.user_attrs[schema.PRUNED_RULE]})
        elif t.state == TrialState.FAIL:
            interrupted.append({"params": key, "trial": t.number})
        elif t.state == TrialState.COMPLETE and schema.launched(t):
            launch = {**launch_of(t), "trial": t.number}
            arm = schema.arm(t)
            if arm != schema.SEARCH:
                baselines.setdefault(arm, []).append({**launch, "params": key})
                continue
            point = points.setdefault(json.dumps(key, sort_keys=True), {
                "params": key, "launched_with": t.user_attrs.get(schema.KNOBS), "launches": []})
            point["launches"].append(launch)
    missing = proposable(space) - set(points) - {json.dumps(r["params"], sort_keys=True) for r in ruled_out}
    if missing:
        raise SystemExit(f"study {name!r} did not launch {sorted(missing)}: not a whole grid")
    source = archive.resolve()
    return {"meta": {"what": f"`tune start --space {space.name}` (sampler grid, tune's own trial runner) "
                             "read back by benchmarks/study_grid.py: every launch of each config, "
                             "`tune confirm`'s repeats included",
                     "source": str(source.relative_to(REPO)) if source.is_relative_to(REPO) else str(source),
                     "study": name, "launch_space": space.name, "model_shape": model_shape,
                     "objective": space.objective.metric, "direction": space.objective.direction,
                     "gpu": gpu, "space": space.model_dump(mode="json"),
                     "costs": "ready_s, bench_s, teardown_s: tune's trial timings; a refused launch: "
                              "time_to_fail_s is its total_s (launch to teardown done)",
                     "baselines": baselines, "ruled_out": ruled_out, "interrupted": interrupted},
            "knobs": knobs, "points": list(points.values())}
