"""The performance model's prediction of the load a config sustains within SLOs: the largest batch
within the SLOs, as a request rate by Little's law, the worst workload after its load scale."""

from __future__ import annotations

import math

import yaml

from tests.helpers import SPACES_DIR
from tuner.configs.predict import predict_objective
from tuner.engines.hardware import profile
from tuner.estimate import Estimate, EstimateRequest
from tuner.space import load_space


class LinearModel:
    """TTFT and TPOT grow linearly with the batch; the batch is capped by max_num_seqs."""

    name = "linear"
    modelled = frozenset({"max_num_seqs"})

    def __init__(self) -> None:
        self.asked: list[EstimateRequest] = []

    def estimate(self, req: EstimateRequest) -> Estimate:
        self.asked.append(req)
        batch = min(req.max_concurrency or 1, int(req.knobs.get("max_num_seqs", 1024)))
        return Estimate(total_tok_s=1.0, ttft_ms=100.0 + 10 * batch * req.input_len / 1000,
                        tpot_ms=5.0 + 0.5 * batch, batch=batch, feasible=True, source="linear")


def _space(tmp_path, objective: dict, workloads: list[dict]):
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data.pop("workload", None)
    data.update(objective=objective, workloads=workloads)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return load_space(str(path))


SLOS = {"p99_ttft_ms": 2000, "mean_tpot_ms": 50, "failed_pct": 1}
SHORT = {"name": "short", "dataset": "random", "random_input_len": 200, "random_output_len": 101}
LONG = {"name": "long", "dataset": "random", "random_input_len": 2000, "random_output_len": 11,
        "load_scale": 0.25}


def _expected(batch: int, input_len: int, output_len: int) -> float:
    ttft, tpot = 100 + 10 * batch * input_len / 1000, 5 + 0.5 * batch
    return batch / ((ttft + (output_len - 1) * tpot) / 1000)


def test_the_largest_batch_within_the_slos_as_a_rate(tmp_path):
    space = _space(tmp_path, {"slos": SLOS, "max_load": {"low": 1, "high": 64}}, [SHORT])
    est, value = predict_objective(LinearModel(), space, "vllm", {}, profile("h100-sxm-80gb"))
    # TPOT 5 + 0.5 b <= 50 holds up to b = 90: the ladder's 64 is the largest rung within it
    assert est.batch == 64
    assert math.isclose(value, _expected(64, 200, 101))


def test_the_engines_cap_binds_and_the_worst_workload_counts_after_its_scale(tmp_path):
    space = _space(tmp_path, {"slos": SLOS, "aggregate": "worst", "max_load": {"low": 1, "high": 64}},
                   [SHORT, LONG])
    model = LinearModel()
    est, value = predict_objective(model, space, "vllm", {"max_num_seqs": 16}, profile("h100-sxm-80gb"))
    short, long_ = _expected(16, 200, 101), _expected(16, 2000, 11) / 0.25
    assert math.isclose(value, min(short, long_))
    assert {r.input_len for r in model.asked} == {200, 2000}


def test_no_prediction_when_one_request_breaks_an_slo(tmp_path):
    space = _space(tmp_path, {"slos": {"p99_ttft_ms": 50}, "max_load": {"low": 1, "high": 8}}, [SHORT])
    est, value = predict_objective(LinearModel(), space, "vllm", {}, profile("h100-sxm-80gb"))
    assert value is None and "even one request breaks the SLOs" in est.unsupported


def test_the_max_concurrency_knob_predicts_the_batch_itself(tmp_path):
    space = _space(tmp_path, {"slos": SLOS, "max_load": {"knob": "max_concurrency", "low": 1, "high": 512}},
                   [SHORT])
    _, value = predict_objective(LinearModel(), space, "vllm", {}, profile("h100-sxm-80gb"))
    assert value == 64
