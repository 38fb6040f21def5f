"""A grid-sampler study as a measured grid (benchmarks/study_grid.py): the bundled h200-sglang-grid
space run by the live driver and recorder with an executor that answers instead of launching (one
config refused), `tune confirm`'s repeats queued and run, the study exported as `tune export`
does, converted, and replayed through the driver; each check reads back what the executor
answered."""

from __future__ import annotations

import json
import sys

import optuna
import pytest
import yaml

from benchmarks import replay_measured as rm
from benchmarks.study_grid import grid_from_study
from tests.helpers import UnlaunchedExecutor
from tuner.engines.failures import Failure
from tuner.engines.hardware import profile
from tuner.paths import SPACES_DIR
from tuner.record.transfer import export_study
from tuner.space import space_from_dict
from tuner.study import lifecycle
from tuner.study.driver import run
from tuner.study.executors import Finished
from tuner.study.recorder import TrialRecorder
from tuner.study.replay import Grid

GPU = "h200-141gb"
REFUSED = {"quantization": "fp8", "kv_cache_dtype": "fp8", "max_num_seqs": 256}
REPEATS = 2


def _value(knobs: dict, occurrence: int) -> float:
    """Throughput by config (online FP8 and more sequences faster), a little more each repeat."""
    base = 6000.0 + 2000.0 * (knobs["quantization"] == "fp8") + 300.0 * (
        knobs["kv_cache_dtype"] == "fp8") + 100.0 * (knobs["max_num_seqs"] == 1024)
    return base + 10.0 * occurrence


class TimedExecutor(UnlaunchedExecutor):
    """Answers each trial with a value and tune's trial timings; launches nothing. ``answers``
    keeps what it gave, by trial number."""

    def __init__(self) -> None:
        super().__init__()
        self.answers: dict[int, dict] = {}

    def wait(self):
        task, outcome = self.next_outcome()
        n = len(self.answers)
        searched = {k: task.knobs[k] for k in REFUSED}
        if searched == REFUSED and not task.omit:
            outcome.failure = Failure("invalid-config", "SGLang rejected the combination of arguments",
                                      "ValueError: fp8 KV with fp8 weights at 256 (made up)")
            outcome.timings = {"teardown_s": 11.0, "total_s": 40.0 + n}
        else:
            value = _value(searched, sum(a["knobs"] == searched for a in self.answers.values()))
            outcome.metrics = {"completed": 400, "failed": 0, "total_token_throughput": value}
            outcome.workload_metrics = {task.space.workload.name: outcome.metrics}
            outcome.timings = {"ready_s": 70.0 + n, "bench_s": 12.0 + n / 10, "teardown_s": 11.0,
                               "total_s": 93.0 + n * 1.1}
        self.answers[task.number] = {"knobs": searched, "omit": bool(task.omit),
                                     "value": outcome.metrics.get("total_token_throughput"),
                                     "timings": outcome.timings}
        return Finished(task.number, outcome)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """(the exported archive, what the executor answered, the study's stored space)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    tmp = tmp_path_factory.mktemp("grid-study")
    raw = yaml.safe_load((SPACES_DIR / "h200-sglang-grid.yaml").read_text())
    sglang = raw["engines"]["sglang"]
    del sglang["install"]
    sglang["command"] = [sys.executable]  # launchable here; the executor answers every trial
    space = space_from_dict(raw, "h200-sglang-grid")
    url = f"sqlite:///{tmp / 'grid.db'}"
    handle = lifecycle.create(space, "grid", url)
    executor = TimedExecutor()
    recorder = TrialRecorder(handle.study, space, url, hardware=profile(GPU))
    run(handle, executor=executor, recorder=recorder)
    lifecycle.enqueue_repeats(handle, top_k=1, repeats=REPEATS)
    run(handle, executor=executor, recorder=recorder)
    archive = export_study("grid", url, tmp / "grid.tar.gz")
    return archive, executor.answers, handle.space.model_dump(mode="json")


@pytest.fixture(scope="module")
def doc(measured):
    return grid_from_study(measured[0], model_shape="Qwen3-14B", gpu=GPU)


@pytest.fixture(scope="module")
def grid(doc):
    return Grid.from_json(doc)


def test_every_grid_point_once_with_every_searched_launch(doc, measured):
    _, answers, _ = measured
    assert doc["knobs"] == ["quantization", "kv_cache_dtype", "max_num_seqs"]
    keys = [json.dumps(p["params"], sort_keys=True) for p in doc["points"]]
    assert len(keys) == len(set(keys)) == 8
    searched = [a for a in answers.values() if not a["omit"]]
    for p in doc["points"]:
        mine = [a for a in searched if a["knobs"] == p["params"]]
        assert [launch["ok"] for launch in p["launches"]] == [a["value"] is not None for a in mine]
        assert [launch["full"][0]["value"] for launch in p["launches"] if launch["ok"]] == [
            a["value"] for a in mine if a["value"] is not None]
    best = max((p for p in doc["points"] if p["launches"][0]["ok"]),
               key=lambda p: p["launches"][0]["full"][0]["value"])
    assert len(best["launches"]) == 1 + REPEATS  # tune confirm's repeats: launches of one point


def test_the_refused_config_is_a_refused_point(doc, measured):
    _, answers, _ = measured
    (point,) = [p for p in doc["points"] if p["params"] == REFUSED]
    (launch,) = point["launches"]
    (answer,) = [a for a in answers.values() if a["knobs"] == REFUSED and not a["omit"]]
    assert not launch["ok"]
    assert launch["time_to_fail_s"] == answer["timings"]["total_s"]
    assert launch["failure_class"] == "invalid-config"


def test_the_baseline_is_kept_apart_and_the_space_is_the_studys(doc, measured):
    _, answers, stored = measured
    (arm,) = doc["meta"]["baselines"]
    assert len(doc["meta"]["baselines"][arm]) == 1 + REPEATS
    assert sum(a["omit"] for a in answers.values()) == 1 + REPEATS
    assert doc["meta"]["space"] == stored
    assert sum(len(p["launches"]) for p in doc["points"]) + 1 + REPEATS == len(answers)


def test_a_study_that_is_not_a_grid_is_refused():
    with pytest.raises(SystemExit, match="not grid"):
        grid_from_study(rm.REPO / "docs" / "results" / "h200-engines.tar.gz", model_shape="Qwen3-14B",
                        gpu=GPU)


@pytest.mark.parametrize("strategy", ["grid", "random", "tpe"])
def test_the_replay_finds_the_grids_best_and_is_charged_its_timings(doc, grid, strategy, tmp_path):
    space = rm.replay_space(doc, tmp_path)
    result = rm.replay(space, grid, strategy, 0, n_trials=12, hardware_gpu=GPU, table=rm.STRATEGIES)
    launched = {grid.key(t.params) for t in result.trials}
    assert launched == {grid.key(p.params) for p in grid.points}
    assert result.trials[-1].reported == grid.best_params
    assert result.final == 1.0
    for t in result.trials:  # each trial is charged one of its point's measured launches
        point = next(p for p in doc["points"] if grid.key(p["params"]) == grid.key(t.params))
        costs = [launch["time_to_fail_s"] if not launch["ok"] else launch["timings"]["ready_s"]
                 + launch["timings"]["teardown_s"] + launch["full"][0]["seconds"]
                 for launch in point["launches"]]
        assert t.seconds == pytest.approx(min(costs, key=lambda c: abs(c - t.seconds)))
        assert t.state == ("infeasible" if t.params == REFUSED else "ok")


def test_the_h200_study_is_the_committed_grid_each_config_launched_once():
    """The real SGLang grid (2026-12-04, two stays: the first cut by the machine's loss during trial
    4, the second resumed): the committed grid is what the committed export converts to, each of
    the 8 configs launched once; the interrupted launch and the 14 trials that repeated a measured
    config (no launch: the recorder reused its value) are not launches."""
    data = rm.REPO / "benchmarks" / "data"
    got = grid_from_study(data / "h200-sglang-grid.tar.gz", model_shape="Qwen3-14B", gpu=GPU)
    committed = json.loads((data / "grid-sglang-h200.json").read_text())
    assert got["points"] == committed["points"]
    assert got["meta"]["baselines"] == committed["meta"]["baselines"]
    assert [len(p["launches"]) for p in got["points"]] == [1] * 8
    assert {launch["trial"] for p in got["points"] for launch in p["launches"]} == {1, 2, 3, 5, 6, 8, 22, 23}
    assert [i["trial"] for i in got["meta"]["interrupted"]] == [4]
    (baseline,) = got["meta"]["baselines"]["sglang-defaults"]
    assert baseline["trial"] == 0 and baseline["ok"]
