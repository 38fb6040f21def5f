"""`tune plan --estimate` with the real AIConfigurator package: every engine of the motivating study's
space gets predictions, configs a rule prunes get none, and the predicted best per engine is shown
with its serve command."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tuner.cli import app
from tuner.configs.plan import build_plan_report
from tuner.engines.hardware import profile
from tuner.estimate import get_estimator
from tuner.space import load_space

pytest.importorskip("aiconfigurator_core", reason="the estimate extra (aiconfigurator-core) is not installed")


def test_every_engine_is_predicted_and_pruned_configs_are_not():
    report = build_plan_report(load_space("a100-throughput"), profile("a100-sxm-80gb"), n_samples=4,
                               seed=0, estimator=get_estimator("aiconfigurator"), candidates=60)
    for ep in report.engines:
        shown = ep.configs + ep.predicted_top
        assert any(c.estimate is not None and c.estimate.predicted for c in shown), ep.engine
        assert len(ep.predicted_top) == 3 and all(c.plan is not None for c in ep.predicted_top)
        for c in shown:
            if c.pruned_by is not None:
                assert c.estimate is None
        values = [c.estimate.total_tok_s for c in ep.predicted_top]
        assert values == sorted(values, reverse=True)
    # TensorRT-LLM + FP8/AWQ on SM80 is pruned: drawn, never predicted, never among the best
    trtllm = next(ep for ep in report.engines if ep.engine == "trtllm")
    assert sum(trtllm.pruned_draws.values()) > 0
    assert all(c.knobs.get("quantization", "none") == "none" for c in trtllm.predicted_top)


def test_the_cli_shows_predictions_and_serve_commands():
    out = CliRunner().invoke(app, ["plan", "--space", "a100-throughput", "--gpu", "a100-sxm-80gb",
                                   "--samples", "1", "--estimate"], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    for engine in ("vllm", "sglang", "trtllm"):
        assert f"a100_sxm/{engine}" in out.output
    assert out.output.count("predicted #1") == 3
    assert "vllm/vllm-openai:v0.11.0 serve Qwen/Qwen3-14B" in out.output
    assert "--entrypoint trtllm-serve" in out.output
