"""The measured-grid replay (benchmarks/replay_measured.py) on the slice of real H200 measurements
(benchmarks/data/grid-h200-slice.json: the five configs the h200-engines study launched): the slice
is what the code makes from the exported study, every strategy runs the live driver on it, and the
launches, the answer and the engine-seconds are read back from the data. Then a slice of the peer's
own measured grid (benchmarks/data/grid-vllm-h200.json, `vllm bench sweep serve` on the H200),
replayed with the real model's predictions."""

from __future__ import annotations

import json

import optuna
import pytest

from benchmarks import replay_measured as rm
from tuner.errors import InputError
from tuner.record import schema
from tuner.space import ENGINE_PARAM
from tuner.study.knowledge import carried_predictions
from tuner.study.replay import Grid

ARCHIVE = rm.REPO / "docs" / "results" / "h200-engines.tar.gz"


@pytest.fixture(scope="module")
def doc():
    return json.loads(rm.SLICE.read_text())


@pytest.fixture(scope="module")
def grid(doc):
    return Grid.from_json(doc)


@pytest.fixture(scope="module")
def space(doc, tmp_path_factory):
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return rm.replay_space(doc, tmp_path_factory.mktemp("shapes"))


@pytest.fixture(scope="module")
def priors(space):
    found = carried_predictions(space, rm.predictions_path(rm.SLICE))
    gap = json.loads(rm.GAP.read_text())["gap"]
    return {"calibrated": rm.calibrated(found, {e: g["bias"] for e, g in gap.items()}, space),
            "raw": rm.calibrated(found, {}, space)}


@pytest.fixture(scope="module")
def runs(space, grid, priors):
    return {name: rm.replay(space, grid, name, 0, n_trials=20, knowledge=priors.get(prior),
                            hardware_gpu="h200-141gb", table=rm.STRATEGIES)
            for name, (_, prior, _) in rm.STRATEGIES.items()}


def _cost(grid, params):
    (launch,) = grid.point(params).launches
    return launch.launch_s + launch.full_s[0]


def test_the_slice_is_the_exported_studys_measured_trials(doc):
    assert rm.slice_from_study(ARCHIVE)["points"] == doc["points"]
    assert sorted(p["trial"] for p in doc["points"]) == [0, 1, 2, 3, 4]  # trial 5 was interrupted
    for p in doc["points"]:
        (launch,) = p["launches"]
        t = launch["timings"]
        assert t["ready_s"] + t["bench_s"] + t["teardown_s"] == pytest.approx(t["total_s"], abs=0.05)


def test_the_optimum_is_the_best_measured_config(grid, doc):
    best = max(doc["points"], key=lambda p: p["launches"][0]["full"][0]["value"])
    assert grid.optimum == best["launches"][0]["full"][0]["value"]
    assert grid.best_params == {k: best["params"].get(k) for k in grid.knobs}
    assert best["trial"] == 3  # vLLM's defaults at gpu_memory_utilization 0.84


def test_every_config_the_space_proposes_was_measured(runs, grid):
    for name, run in runs.items():
        for t in run.trials:
            assert grid.point({k: v for k, v in t.params.items() if v is not None}).feasible, name


def test_launch_counts_follow_from_the_arms(runs, grid, space):
    baselines = len(space.baselines)
    # Every config once as a searched arm, plus each engine's defaults once as its baseline arm
    # (a baseline is its own arm: the searched twin of its config is launched again).
    for name in ("grid", "random", "tpe"):
        assert runs[name].launches == len(grid.points) + baselines, name
        assert {tuple(t.params.values()) for t in runs[name].trials} == {
            tuple(p.params.get(k) for k in grid.knobs) for p in grid.points}
    # The prior adds the model's pick as an arm of its own.
    for name in ("tpe-prior", "tpe-prior-raw"):
        assert runs[name].launches == len(grid.points) + baselines + 1, name
    # Greedy: both engines at their defaults, then the better engine's (vLLM's) knobs one at a time:
    # its FP8 KV cache and, with the KV dtype at auto, gpu_memory_utilization 0.84.
    assert [t.params for t in runs["greedy"].trials[2:]] == [
        {ENGINE_PARAM: "vllm", "kv_cache_dtype": "fp8", "gpu_memory_utilization": None},
        {ENGINE_PARAM: "vllm", "kv_cache_dtype": "auto", "gpu_memory_utilization": 0.84}]


def test_the_best_found_is_the_slices_best_once_every_config_is_launched(runs, grid):
    for name, run in runs.items():
        launched = {tuple(t.params.values()) for t in run.trials}
        if tuple(grid.best_params.values()) in launched:
            assert run.trials[-1].reported == grid.best_params, name
            assert run.final == 1.0, name


def test_engine_seconds_are_the_measured_costs_of_what_was_launched(runs, grid):
    for name, run in runs.items():
        assert all(t.state == "ok" for t in run.trials), name
        assert run.seconds == pytest.approx(sum(_cost(grid, {k: v for k, v in t.params.items()
                                                              if v is not None})
                                                for t in run.trials)), name


def test_the_calibrated_bias_moves_the_models_pick_to_vllm(runs, priors):
    # Raw, the model predicts SGLang's defaults fastest (19,645 against vLLM's 18,418 tok/s); times
    # each engine's measured bias (0.35 and 0.45) vLLM's defaults come first, as measured.
    assert priors["raw"].model_pick.params[ENGINE_PARAM] == "sglang"
    assert priors["calibrated"].model_pick.params[ENGINE_PARAM] == "vllm"
    for name, engine in (("tpe-prior", "vllm"), ("tpe-prior-raw", "sglang")):
        trials = runs[name].study.get_trials(deepcopy=False)
        pick = next(t for t in trials if t.user_attrs.get(schema.ARM) == schema.MODEL_PICK_ARM)
        assert pick.params[ENGINE_PARAM] == engine


def test_the_summary_reads_the_runs(runs):
    summary = rm.summarize({n: [r] for n, r in runs.items()}, [runs["greedy"]], budgets=rm.BUDGETS)
    assert set(summary) == set(rm.STRATEGIES)
    for name, s in summary.items():
        assert set(s["at_launches"]) == {str(b) for b in rm.BUDGETS}
        assert s["launches_mean"] == runs[name].launches
        assert s["reach_launches_median"] == runs[name].reach_launches()


# ---- a slice of the peer's measured grid (benchmarks/data/grid-vllm-h200.json) ----------------

PEER_GRID = rm.DATA / "grid-vllm-h200.json"
FP8_AUTO_8192 = {"max_num_tokens": 8192, "kv_cache_dtype": "auto"}


def test_a_part_of_the_grid_is_refused_while_a_config_it_proposes_is_unmeasured():
    doc = json.loads(PEER_GRID.read_text())
    part = rm.restrict(doc, FP8_AUTO_8192)
    assert len(part["points"]) == 4 and part["meta"]["space"]["baselines"]   # the defaults are in it
    gone = part["points"][0]["params"]
    doc["points"] = [p for p in doc["points"] if p["params"] != gone]
    with pytest.raises(InputError, match="lacks measured configs") as e:
        rm.restrict(doc, FP8_AUTO_8192)
    assert json.dumps(gone, sort_keys=True) in str(e.value)
    with pytest.raises(InputError, match="not one of its values"):
        rm.restrict(doc, {"max_num_tokens": 4096})
    assert rm.restrict(part, {"max_num_seqs": "1024"})["meta"]["restricted"]["max_num_seqs"] == 1024


def test_restrict_refuses_bad_input_with_exit_2_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "part.json"
    (tmp_path / "not-a-grid.json").write_text("{}")
    for argv, named in ((["--grid", str(PEER_GRID), "--fix", "max_num_tokens"], "--fix max_num_tokens"),
                        (["--grid", str(PEER_GRID), "--fix", "max_num_tokens=4096"], "max_num_tokens=4096"),
                        (["--grid", str(tmp_path / "missing.json"), "--fix", "max_num_tokens=8192"], "missing.json"),
                        (["--grid", str(tmp_path / "not-a-grid.json"), "--fix", "max_num_tokens=8192"],
                         "not-a-grid.json: not a measured grid")):
        with pytest.raises(SystemExit) as e:
            rm.main(["restrict", *argv, "--out", str(out)])
        assert e.value.code == 2 and not out.exists(), argv
        err = capsys.readouterr().err
        assert named in err and "Traceback" not in err, err


def test_the_prior_finds_the_online_fp8_step_of_the_peers_grid_at_its_second_launch(tmp_path):
    # The part at 8,192 batched tokens and KV auto: BF16 and online FP8 weights at 256 and 1,024
    # sequences, each measured by `vllm bench sweep serve` on the H200 (3 runs per launch).
    part = rm.restrict(json.loads(PEER_GRID.read_text()), FP8_AUTO_8192)
    grid = Grid.from_json(part)
    assert grid.best_params["quantization"] == "fp8"
    space = rm.replay_space(part, tmp_path / "shapes")
    found = rm.predict_points(part, tmp_path / "predictions.json")      # the real model
    assert len(found.predictions) == 4
    bias = {e: g["bias"] for e, g in json.loads(rm.GAP.read_text())["gap"].items()}
    prior = rm.calibrated(found, bias, space)
    assert prior.model_pick.params["quantization"] == "fp8"
    run = rm.replay(space, grid, "tpe-prior", 0, n_trials=8, knowledge=prior, hardware_gpu="h200-141gb",
                    table=rm.STRATEGIES)
    assert run.reach_launches() == 2           # the defaults, then the model's pick
    run = rm.replay(space, grid, "grid", 0, n_trials=8, hardware_gpu="h200-141gb", table=rm.STRATEGIES)
    assert run.launches == len(grid.points) + 1 and run.final >= 0.98
    assert run.seconds == pytest.approx(sum(_cost(grid, t.params) for t in run.trials), rel=0.02)
