"""`tune plan`: the space, what is pruned on the target hardware and why, and exact launch commands."""

import shlex

import pytest
import yaml
from typer.testing import CliRunner

from tests.helpers import fixture_space

from tuner.cli import app
from tuner.configs.plan import build_plan_report
from tuner.engines.hardware import profile
from tuner.space import load_space


@pytest.fixture(scope="module")
def cli():
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args), env={"COLUMNS": "250"})


@pytest.fixture(scope="module")
def a100_report():
    return build_plan_report(load_space("a100-throughput"), profile("a100-sxm-80gb"), n_samples=3)


def test_a100_plan_prunes_trtllm_fp8_and_awq_with_rule_ids(cli):
    result = cli("plan", "--space", "a100-throughput", "--gpu", "a100-sxm-80gb")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "pruned before launch" in out
    for line in ("trtllm │ quantization=fp8 │ trtllm-fp8-block-scale-sm",
                 "trtllm │ quantization=awq │ trtllm-autoawq-checkpoint"):
        assert line in out
    assert "FP8 block-scale GEMM exists only for SM 89/90/100/103/120" in out
    # a valid command line for each of the three engines
    assert ("--entrypoint vllm vllm/vllm-openai:v0.11.0 serve Qwen/Qwen3-14B --host 0.0.0.0 "
            "--port 8000") in out
    assert ("--entrypoint python3 lmsysorg/sglang:v0.5.5.post1 -m sglang.launch_server "
            "--model-path Qwen/Qwen3-14B") in out
    assert ("--entrypoint trtllm-serve nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1 serve "
            "Qwen/Qwen3-14B --host 0.0.0.0 --port 8000 --max_seq_len 40960 "
            "--extra_llm_api_options trtllm-config.yaml") in out
    assert "enable_chunked_prefill: true" in out
    assert "NVIDIA A100-SXM4-80GB (SM 8.0, 80 GiB)" in out


def test_report_regions_and_configs(a100_report):
    regions = {(r.engine, tuple(r.assignment.items())): [v.rule_id for v in r.verdicts]
               for r in a100_report.regions}
    assert regions == {("trtllm", (("quantization", "fp8"),)): ["trtllm-fp8-block-scale-sm"],
                       ("trtllm", (("quantization", "awq"),)): ["trtllm-autoawq-checkpoint"]}
    by_engine = {e.engine: e for e in a100_report.engines}
    assert list(by_engine) == ["vllm", "sglang", "trtllm"]
    for ep in a100_report.engines:
        samples = [c for c in ep.configs if c.label.startswith("sample")]
        assert len(samples) == 3 and all(c.plan and not c.pruned_by for c in samples)
        for c in samples:  # no sampled TensorRT-LLM config loads the FP8 or AWQ checkpoint
            if ep.engine == "trtllm":
                assert c.knobs["quantization"] == "none"
    assert set(by_engine["trtllm"].pruned_draws) <= {"trtllm-fp8-block-scale-sm",
                                                      "trtllm-autoawq-checkpoint"}


def test_baselines_launch_with_engine_defaults(a100_report):
    vllm = next(e for e in a100_report.engines if e.engine == "vllm").configs[0]
    assert vllm.label == "baseline vllm-defaults" and vllm.knobs == {}
    # the engine's own command line inside its pinned image: no knob flags
    image_at = vllm.plan.argv.index("vllm/vllm-openai:v0.11.0")
    assert vllm.plan.argv[image_at - 2:image_at] == ["--entrypoint", "vllm"]
    assert vllm.plan.argv[image_at + 1:] == ["serve", "Qwen/Qwen3-14B", "--host", "0.0.0.0", "--port",
                                             "8000", "--served-model-name", "Qwen3-14B"]
    sglang = next(e for e in a100_report.engines if e.engine == "sglang").configs[0]
    assert sglang.label == "engine defaults" and "--chunked-prefill-size" not in sglang.plan.argv
    trt = next(e for e in a100_report.engines if e.engine == "trtllm").configs[0]
    assert trt.label == "baseline trtllm-study-choice"
    assert yaml.safe_load(trt.plan.config_file) == {"enable_chunked_prefill": True}


def test_sampled_quantized_configs_use_checkpoints(a100_report):
    for ep in a100_report.engines:
        for c in ep.configs:
            if c.plan and c.knobs.get("quantization") in ("fp8", "awq"):
                suffix = c.knobs["quantization"].upper()
                assert c.plan.model_path == f"Qwen/Qwen3-14B-{suffix}"
                assert "--quantization" not in c.plan.argv


def test_trtllm_yaml_never_repeats_a_cli_value(a100_report):
    trt = next(e for e in a100_report.engines if e.engine == "trtllm")
    for c in trt.configs:
        if c.plan and c.plan.config_file:
            keys = set(yaml.safe_load(c.plan.config_file))
            cli_flags = {a.lstrip("-") for a in c.plan.argv if a.startswith("--")}
            assert not keys & cli_flags, c.plan.command_line()


def test_notes_are_shown_and_commands_are_copyable(cli):
    out = cli("plan", "--space", "a100-throughput", "--gpu", "a100-sxm-80gb", "--samples", "8").output
    assert "vllm-fp8-weight-only" in out or "sglang-fp8-marlin" in out
    for line in out.splitlines():
        if line.startswith("    docker run "):
            argv = shlex.split(line)  # copyable: the shell splits it back into the argv
            assert argv[:2] == ["docker", "run"] and "--entrypoint" in argv


def test_cpu_plan_on_this_machine(cli):
    result = cli("plan", "--space", "cpu-transformers", "--samples", "1")
    assert result.exit_code == 0, result.output
    assert "transformers serve" in result.output and "--continuous-batching" in result.output
    assert "detected" in result.output


def test_plan_for_h200_shows_the_long_prompt_region(cli):
    out = cli("plan", "--space", "h200-throughput", "--gpu", "h200-141gb", "--samples", "1").output
    assert "chunked_prefill=False, max_num_tokens=2048 │ trtllm-prompt-over-max-num-tokens" in out
    assert "trtllm-fp8-block-scale-sm" not in out  # SM90 has FP8 block-scale GEMM


@pytest.mark.parametrize("args, message", [
    (("--space", "a100-throughput", "--gpu", "a100"), "unknown GPU profile 'a100'; known: a100-sxm-80gb"),
    (("--space", "no-such-space"), "unknown space 'no-such-space'"),
])
def test_bad_input_is_an_error_naming_it(cli, args, message):
    result = cli("plan", *args)
    assert result.exit_code == 2
    assert message in result.output


def test_every_shipped_space_plans_on_its_own_gpu():
    for space, gpu in [("a100-throughput", "a100-sxm-80gb"), ("h100-throughput", "h100-sxm-80gb"),
                       ("h200-throughput", "h200-141gb"), ("rtx4090-24gb", "rtx-4090"),
                       ("cpu-smoke", "cpu-avx2"), ("cpu-transformers", "cpu-avx2"),
                       (fixture_space("h200-quality"), "h200-141gb")]:
        report = build_plan_report(load_space(space), profile(gpu), n_samples=2)
        for ep in report.engines:
            assert all(c.error is None for c in ep.configs), (space, ep.engine)
            assert sum(1 for c in ep.configs if c.plan) >= 2, (space, ep.engine)


def test_the_h200_quality_plan_shows_the_guardrail_and_the_fp8_checkpoint(cli):
    out = cli("plan", "--space", fixture_space("h200-quality"), "--gpu", "h200-141gb", "--samples", "8").output
    assert ("quality reference arm quality-reference (transformers, dtype bfloat16, quantization "
            "none, KV cache bfloat16) runs first") in out
    assert "no logprobs from transformers: tokens compared only" in out
    assert "baseline quality-reference: quantization=none cb_max_batch_tokens=512" in out
    assert "--quantization bnb-8bit" in out and "qwen3-0.6b-random-fp8 --host" in out
