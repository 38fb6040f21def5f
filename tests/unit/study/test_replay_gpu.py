"""The GPU-scale replay (benchmarks/replay_gpu.py) on a small subset of the A100 landscape: it runs the
live driver with the model's prior (baselines, the model's pick and seeds queued first, the prior
sampler proposing), the recorder prunes by the A100's rules, and the results are read back."""

from __future__ import annotations

import math
import statistics

import numpy as np
import optuna
import pytest

from benchmarks import replay_gpu as rg
from benchmarks.landscape import write_checkpoints
from tuner.record import schema
from tuner.study.knowledge import Knowledge
from tuner.study.prior import Prediction, PriorSampler

SMALL = {"quantization": ["none", "fp8"], "max_num_seqs": [256, 1024],
         "max_num_tokens": [2048, 8192], "max_seq_len": [40960], "gpu_memory_utilization": [0.9],
         "kv_cache_dtype": ["auto"], "chunked_prefill": [True, False]}
GPU = "a100-sxm-80gb"


@pytest.fixture(scope="module")
def land():
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return rg.Landscape.load("a100").subset(**SMALL)


@pytest.fixture(scope="module")
def space(land, tmp_path_factory):
    return rg.replay_space(land, write_checkpoints(tmp_path_factory.mktemp("shapes"), "Qwen3-14B"))


def test_the_subset_is_a_whole_small_space(land):
    engines = {c["engine"] for c in land.configs}
    assert engines == set(rg.ENGINES)
    assert 30 < len(land.configs) < 60
    for engine, defaults in rg.DEFAULTS.items():  # the baselines: each engine at its defaults
        assert land.ok[land.configs.index({"engine": engine, **defaults})]
    assert "pruned" in land.status  # FP8 block-scale checkpoints on SM80


def test_truth_is_the_estimate_at_sigma_zero_and_drifts_with_sigma(land):
    exact = rg.build_grid(land, rg.Gap(sigma=0.0), seed=3)
    off = rg.build_grid(land, rg.Gap(sigma=0.5), seed=3)
    ok = np.flatnonzero(land.ok)
    ratio0 = [exact.points[i].true_value / land.estimate[i] for i in ok]
    ratio5 = [off.points[i].true_value / land.estimate[i] for i in ok]
    assert max(abs(r - 1) for r in ratio0) < 0.06  # launch noise only
    assert statistics.pstdev(math.log(r) for r in ratio5) > 0.1
    assert all(not p.feasible for p, s in zip(off.points, land.status) if s != "ok")


def test_the_prior_arm_runs_the_live_driver_and_is_read_back(land, space):
    grid = rg.build_grid(land, rg.Gap(sigma=0.3), seed=0)
    knowledge = rg.model_knowledge(land)
    run = rg.replay(space, grid, "tpe-prior", 0, n_trials=8, knowledge=knowledge, hardware_gpu=GPU)
    trials = run.study.get_trials(deepcopy=False)
    arms = [t.user_attrs.get(schema.ARM) for t in trials]
    assert arms[:4] == ["vllm-defaults", "sglang-defaults", "trtllm-defaults", schema.MODEL_PICK_ARM]
    assert trials[3].params == knowledge.model_pick.params
    assert isinstance(run.study.sampler, PriorSampler)
    assert run.launches == 8
    assert 0 < run.final <= 1
    assert run.seconds > 8 * 60  # GPU-like launches: a minute or more each


def test_the_replayed_gpus_rules_prune_before_a_launch(land, space):
    # TensorRT-LLM with the block-scale FP8 checkpoint cannot start on SM80: queued as the model's
    # pick, the recorder (judging for the A100) answers it without a launch, at no cost.
    fp8 = next(c for c, s in zip(land.configs, land.status)
               if s == "pruned" and c["engine"] == "trtllm" and c["quantization"] == "fp8")
    knowledge = Knowledge([], [], Prediction(fp8, 1.0, "model"))
    run = rg.replay(space, rg.build_grid(land, rg.Gap(sigma=0.3), seed=2), "model-pick", 2, knowledge=knowledge,
                    hardware_gpu=GPU)
    assert run.trials[0].params == {k: fp8.get(k) for k in rg.GRID_KNOBS}
    assert run.trials[0].state == "rule-pruned" and run.trials[0].seconds == 0
    assert run.launches == 1 and run.trials[-1].state != "rule-pruned"


def test_summary_and_targets_read_the_runs(land, space):
    grid = rg.build_grid(land, rg.Gap(sigma=0.3), seed=1)
    model = rg.model_knowledge(land)
    runs = {"greedy": [rg.replay(space, grid, "greedy", 1, n_trials=10, hardware_gpu=GPU)],
            "tpe": [rg.replay(space, grid, "tpe", 1, n_trials=10, hardware_gpu=GPU)],
            "tpe-prior": [rg.replay(space, grid, "tpe-prior", 1, n_trials=10, knowledge=model,
                                    hardware_gpu=GPU)],
            "model-pick": [rg.replay(space, grid, "model-pick", 1, knowledge=rg.pick_only(model),
                                     hardware_gpu=GPU)]}
    assert runs["model-pick"][0].launches == 1
    summary = rg.summarize(runs, runs["greedy"])
    assert summary["greedy"]["final_launches_median"] == runs["greedy"][0].launches
    assert set(summary["tpe-prior"]["at_launches"]) == {str(b) for b in rg.BUDGETS}
    regret = rg.model_pick_regret(runs["model-pick"])
    assert 0 <= regret["mean"] < 100
    tgts = rg.targets({f"a100 sigma={rg.TARGET_SIGMA:g}": {"summary": summary}})
    assert [t["target"].split(":")[0] for t in tgts] == ["a100, sigma 0.3"] * 2
    assert all(isinstance(t["met"], bool) for t in tgts)


def test_a_misleading_prior_shuffles_the_values_over_the_same_configs(land):
    true, shuffled = rg.model_knowledge(land), rg.model_knowledge(land, shuffle_seed=0)
    assert [p.params for p in true.predictions] == [p.params for p in shuffled.predictions]
    assert sorted(p.value for p in true.predictions) == sorted(p.value for p in shuffled.predictions)
    assert [p.value for p in true.predictions] != [p.value for p in shuffled.predictions]


def test_the_measured_gap_puts_each_engines_bias_and_spread_on_the_estimate(land):
    gap = rg.Gap.from_file(rg.DATA / "reality-gap-h200.json")
    measured = {e: (b, sd) for e, b, sd, _ in gap.measured}
    assert set(measured) == {"vllm", "sglang"}  # calibrate.py's file: TensorRT-LLM was not run
    engines = np.array([c["engine"] for c in land.configs])
    logs = np.array([gap.log_ratio(land, seed) for seed in range(40)])
    mean, spread, pooled = gap.unmeasured()
    expect = {"vllm": math.log(measured["vllm"][0]), "sglang": math.log(measured["sglang"][0]),
              "trtllm": mean}
    for engine, log_bias in expect.items():
        assert logs[:, engines == engine].mean() == pytest.approx(log_bias, abs=0.08), engine
    # Within an engine the truth bends by the measured spread, not the assumed 0.3.
    for engine, (_, sd) in measured.items():
        within = statistics.fmean(float(np.std(row[engines == engine])) for row in logs)
        assert within < 2 * sd < 0.3, engine
    assert mean == pytest.approx(statistics.fmean(math.log(b) for b, _ in measured.values()))
    assert min(sd for _, sd in measured.values()) < pooled < max(sd for _, sd in measured.values())
    # SGLang is measured further below its estimate than vLLM: the truth reorders the engines.
    ratio = math.exp(logs[:, engines == "vllm"].mean() - logs[:, engines == "sglang"].mean())
    assert ratio == pytest.approx(measured["vllm"][0] / measured["sglang"][0], rel=0.1)

