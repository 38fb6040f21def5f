"""`tune doctor`, the preflight of `tune start`, and the GPU spaces' container launch lines, on this
machine (no NVIDIA GPU, whatever container daemon it has)."""

from __future__ import annotations

import subprocess
import sys

from typer.testing import CliRunner

from tuner.cli import app

runner = CliRunner()


def _tune(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tuner", *args], capture_output=True, text=True,
                          timeout=300, cwd=cwd, env={"COLUMNS": "250", "PATH": "/usr/bin:/bin:/usr/local/bin",
                                                     "HOME": "/root"})


def test_doctor_on_a_gpu_space_names_the_missing_gpu_and_runtime_with_fixes():
    r = runner.invoke(app, ["doctor", "--space", "a100-throughput"], env={"COLUMNS": "250"})
    assert r.exit_code == 1
    assert "no NVIDIA GPU" in r.output and "install the NVIDIA driver" in r.output
    assert "docker" in r.output  # the engines run from images: the runtime is checked
    assert "tune data sharegpt" in r.output


def test_doctor_passes_on_a_cpu_space_whose_engine_is_installed(vllm_bin, tiny_model_path):
    r = runner.invoke(app, ["doctor", "--space", "cpu-smoke"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "vllm 0.32.0+cpu" in r.output


def test_start_stops_before_the_study_exists_when_the_preflight_fails(tmp_path):
    r = _tune("start", "--space", "a100-throughput", cwd=tmp_path)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "the study cannot run here" in r.stdout and "Traceback" not in r.stderr
    assert not (tmp_path / "studies").exists() or not any((tmp_path / "studies").iterdir())


def test_gpu_spaces_launch_every_engine_from_its_pinned_image():
    r = runner.invoke(app, ["plan", "--space", "a100-throughput", "--gpu", "a100-sxm-80gb",
                            "--samples", "0"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    for image in ("vllm/vllm-openai:v0.11.0", "lmsysorg/sglang:v0.5.5.post1",
                  "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1"):
        assert image in r.output
    assert r.output.count("--gpus all") >= 3
    assert "-v /root/.cache/huggingface:/root/.cache/huggingface" in r.output or \
        ".cache/huggingface:/root/.cache/huggingface" in r.output
    assert "-e HF_TOKEN " in r.output


def test_engine_overrides_are_checked_and_applied():
    r = runner.invoke(app, ["start", "--space", "a100-throughput", "--engine-image", "tgi=x"])
    assert r.exit_code == 2 and "the space has no engine 'tgi'" in r.output


def test_plan_says_how_long_each_max_load_probe_offers_its_rate(tmp_path, tiny_model_path):
    import yaml

    from tuner.space import load_space

    space = load_space("cpu-smoke").model_dump(mode="json", exclude_none=True)
    space["objective"] = {"slos": {"p99_ttft_ms": 2000},
                          "max_load": {"knob": "request_rate", "low": 1, "high": 8, "probes": 3}}
    path = tmp_path / "slo.yaml"
    path.write_text(yaml.safe_dump(space))
    r = runner.invoke(app, ["plan", "--space", str(path), "--samples", "0"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "Set objective.max_load.duration_s" in r.output
    space["objective"]["max_load"]["duration_s"] = 8
    path.write_text(yaml.safe_dump(space))
    r = runner.invoke(app, ["plan", "--space", str(path), "--samples", "0"], env={"COLUMNS": "400"})
    assert r.exit_code == 0, r.output
    assert "each offered for 8 s" in r.output and "duration_s" not in r.output
