"""`tune compare` (one study's config against another study's) and `tune gap` (the performance
model against a study's measurements), on synthetic studies of the cpu-smoke space (no engine)."""

from __future__ import annotations

import json
import math

import optuna
import pytest
from typer.testing import CliRunner

from tests.helpers import ok_trial, stored_study
from tuner.cli import app
from tuner.estimate import ESTIMATORS, Estimate
from tuner.record import schema
from tuner.report.gap import gap, predicted_rows
from tuner.engines.hardware import profile
from tuner.study.lifecycle import load

optuna.logging.set_verbosity(optuna.logging.WARNING)
runner = CliRunner()
DEFAULTS = {"max_num_seqs": 128, "chunked_prefill": True}


class _Linear:
    """A stand-in performance model: 100 tok/s per max_num_seqs, 12 800 at the engine default."""

    name = "test-linear"
    modelled = frozenset({"max_num_seqs"})

    def estimate(self, req):
        seqs = req.knobs.get("max_num_seqs", 128)
        return Estimate(total_tok_s=100.0 * seqs, output_tok_s=20.0 * seqs, feasible=True, source="test")


if "test-linear" not in ESTIMATORS:
    ESTIMATORS.register("test-linear")(_Linear)


@pytest.fixture
def two_studies(studies):
    studies.mkdir()
    stored_study(studies, "first", [ok_trial(5000.0, DEFAULTS, "vllm-defaults"),
                                     *(ok_trial(v, {"max_num_seqs": 16, "chunked_prefill": True}) for v in (6000.0, 6100.0, 5900.0))])
    stored_study(studies, "second", [ok_trial(v, DEFAULTS, "vllm-defaults") for v in (4000.0, 4100.0, 3900.0)]
                 + [ok_trial(4500.0, {"max_num_seqs": 8, "chunked_prefill": True})])
    return studies


def test_one_studys_pick_against_another_studys_baseline(two_studies):
    r = runner.invoke(app, ["compare", "first", "second"])
    assert r.exit_code == 0, r.output
    head, versus = r.output.splitlines()[:2]
    assert head == "first trial 1 (search, n=3): median 6,000.0"
    assert versus.startswith("  vs second trial 0 (vllm-defaults, n=3), median 4,000.0: +50.0%")
    assert "(n=3 vs n=3)" in versus
    r = runner.invoke(app, ["compare", "first:0", "second:3"])      # named trials, one launch each side
    assert r.exit_code == 0, r.output
    assert "+11.1%" in r.output and "no interval" in r.output


@pytest.mark.parametrize("args, message", [
    (["compare", "first:9", "second"], "trial 9 is no feasible launch of study 'first'"),
    (["compare", "first:x", "second"], "name a config as STUDY or STUDY:TRIAL"),
    (["compare", "first", "nope"], "no study named 'nope'"),
])
def test_a_config_named_wrong_is_refused_with_exit_2(two_studies, args, message):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and message in r.output and "Traceback" not in r.output


def test_the_gap_is_bias_spread_and_rank_order_per_engine(two_studies, tmp_path):
    handle = load("second", f"sqlite:///{two_studies / 'second.db'}")
    rows = predicted_rows(handle, _Linear(), profile("cpu"))
    assert [(r.arm, r.measured, r.predicted) for r in rows] == [("vllm-defaults", 4000.0, 12800.0),
                                                                ("search", 4500.0, 800.0)]
    g = gap(rows)["vllm"]
    logs = [math.log(4000 / 12800), math.log(4500 / 800)]
    assert g["n"] == 2 and g["bias"] == pytest.approx(math.exp(sum(logs) / 2))
    assert g["sigma_log"] == pytest.approx(abs(logs[0] - logs[1]) / math.sqrt(2))
    assert g["spearman_rho"] is None and g["fp8_step"] is None      # 2 configs: no rank order
    assert g["within_quantization"] == {"none": {"n": 2, "spearman_rho": None}}
    out = tmp_path / "gap.json"
    r = runner.invoke(app, ["gap", "first", "--gpu", "cpu", "--estimator", "test-linear", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "vllm: n=2 bias (measured/predicted)" in r.output and "Spearman rho - (n < 3)" in r.output
    doc = json.loads(out.read_text())
    assert doc["gap"]["vllm"]["n"] == 2 and len(doc["configs"]) == 2
    r = runner.invoke(app, ["gap", "first", "--gpu", "no-such-gpu", "--estimator", "test-linear"])
    assert r.exit_code == 2 and "unknown GPU profile 'no-such-gpu'" in r.output


def test_the_gap_leaves_out_a_config_that_broke_an_slo(studies):
    """A trial that met no SLO (a max-load search's 0: below its lowest load) has no value to
    compare with a prediction; the engine ran, so only its constraints say so."""
    studies.mkdir()
    broke = ok_trial(0.0, {"max_num_seqs": 8, "chunked_prefill": True})
    broke = optuna.trial.create_trial(value=0.0, params=broke.params, distributions=broke.distributions,
                                      user_attrs=broke.user_attrs,
                                      system_attrs={"constraints:engine_start": 0.0,
                                                    "constraints:slo:max_load": 1.0})
    url = stored_study(studies, "slo", [ok_trial(4000.0, DEFAULTS, "vllm-defaults"), broke])
    rows = predicted_rows(load("slo", url), _Linear(), profile("cpu"))
    assert [(r.arm, r.measured) for r in rows] == [("vllm-defaults", 4000.0)]


def test_the_gap_pools_studies_one_row_per_config(two_studies):
    """A config launched in two studies (a search and the judge that re-launched it) is one row,
    measured as the median of all its launches; studies of other GPUs are refused."""
    handles = [load(n, f"sqlite:///{two_studies / f'{n}.db'}") for n in ("first", "second")]
    rows = predicted_rows(handles, _Linear(), profile("cpu"))
    defaults = next(r for r in rows if r.arm == "vllm-defaults")
    assert sorted(defaults.runs) == [3900.0, 4000.0, 4100.0, 5000.0] and defaults.measured == 4050.0
    assert defaults.trials == ["first:0", "second:0", "second:1", "second:2"]
    assert len(rows) == 3 and gap(rows)["vllm"]["n"] == 3
    r = runner.invoke(app, ["gap", "first", "second", "--gpu", "cpu", "--estimator", "test-linear"])
    assert r.exit_code == 0 and "vllm: n=3" in r.output, r.output
    handles[1].study.set_user_attr(schema.FINGERPRINT, {"gpu": "NVIDIA H100 80GB HBM3"})
    r = runner.invoke(app, ["gap", "first", "second", "--gpu", "cpu", "--estimator", "test-linear"])
    assert r.exit_code == 2 and "ran on different GPUs" in r.output and "Traceback" not in r.output


def test_studies_of_other_workloads_are_not_pooled(two_studies):
    """A value is its objective on its workloads, of its model: pooled rows are predicted with the
    first study's space, so a study that measured other prompts is refused, naming what differs."""
    from tuner.space import load_space

    base = load_space("cpu-smoke")
    other = base.model_copy(update={"workload": base.workload.model_copy(update={"num_prompts": 7})})
    assert base.differences(other) == ["workloads"]
    assert base.differences(other, ("objective", "model")) == []
    stored_study(two_studies, "other", [ok_trial(4000.0, DEFAULTS, "vllm-defaults")], space=other)
    r = runner.invoke(app, ["gap", "first", "other", "--gpu", "cpu", "--estimator", "test-linear"])
    assert r.exit_code == 2 and "differ in their workloads" in r.output and "Traceback" not in r.output
