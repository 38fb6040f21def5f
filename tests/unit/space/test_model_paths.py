"""A local model path that is not there is an error naming the key before anything is created; a
Hugging Face id is the engine's to fetch."""

from __future__ import annotations

import json

import pytest
import yaml
from typer.testing import CliRunner

from tests.helpers import fixture_space
from tuner.cli.app import app
from tuner.engines.model_config import read_model_config
from tuner.paths import SPACES_DIR
from tuner.space import model_path_problems, space_from_dict

runner = CliRunner()


def _space(path: str, **model) -> object:
    return space_from_dict({"name": "m", "model": {"path": path, **model}, "engines": {"vllm": {}}})


@pytest.fixture
def model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"num_attention_heads": 8}))
    read_model_config.cache_clear()
    return d


@pytest.mark.parametrize("path", ["Qwen/Qwen3-14B", "gpt2", "meta-llama/Llama-3.1-8B-Instruct"])
def test_a_hub_id_is_left_to_the_engine(path, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # not downloaded here
    read_model_config.cache_clear()
    assert model_path_problems(_space(path)) == []


@pytest.mark.parametrize("path", ["/no/such/dir", "./models/none", "../none", "~/no-such-model",
                                  "${TUNER_CACHE}/models/none", "$HOME/none", "models/a/b"])
def test_a_local_path_that_is_not_there_is_named(path, monkeypatch, tmp_path):
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path))
    (problem,) = model_path_problems(_space(path))
    assert problem.startswith(f"model.path: {path}") and "no such directory" in problem
    if path.startswith("${TUNER_CACHE}"):  # the expansion is shown too
        assert f"{path} (= {tmp_path}/models/none): no such directory" in problem


def test_a_folder_without_config_json_and_a_file_are_named(tmp_path, model_dir):
    (model_dir / "config.json").unlink()
    (problem,) = model_path_problems(_space(str(model_dir)))
    assert problem == f"model.path: {model_dir}: holds no config.json (not a Hugging Face model folder)"
    weights = tmp_path / "model.safetensors"
    weights.write_bytes(b"\0")
    assert model_path_problems(_space(str(weights))) == [
        f"model.path: {weights}: is a file, not a folder"]
    gguf = tmp_path / "model.gguf"  # a single GGUF file is a model vLLM and SGLang load
    gguf.write_bytes(b"GGUF")
    assert model_path_problems(_space(str(gguf))) == []


def test_variants_and_tokenizer_are_checked_too(tmp_path, model_dir):
    space = _space(str(model_dir), tokenizer=str(tmp_path / "tok"),
                   variants={"fp8": str(model_dir), "awq": "/no/awq", "gptq": "Org/Model-GPTQ"})
    assert model_path_problems(space) == [
        "model.variants.awq: /no/awq: no such directory (a local model folder with a config.json, "
        "or a Hugging Face id like Qwen/Qwen3-14B)",
        f"model.tokenizer: {tmp_path / 'tok'}: no such directory"]


def test_an_unreadable_config_json_is_named(model_dir, tmp_path, monkeypatch):
    (model_dir / "config.json").write_bytes(b'{"name": "caf\xe9"}')
    (problem,) = model_path_problems(_space(str(model_dir)))
    assert problem.startswith(f"model.path: model config {model_dir / 'config.json'}: not UTF-8")
    (model_dir / "config.json").write_text("[1, 2]")
    read_model_config.cache_clear()
    (problem,) = model_path_problems(_space(str(model_dir)))
    assert "expected a JSON object, got list" in problem
    # A hub id's config.json already in the local cache is read too.
    snap = tmp_path / "hub" / "models--Org--M" / "snapshots" / "abc"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text("{not json")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    (problem,) = model_path_problems(_space("Org/M"))
    assert problem.startswith(f"model.path: model config {snap / 'config.json'}: not valid JSON")
    read_model_config.cache_clear()


def test_start_and_plan_refuse_a_missing_model_before_creating_anything(tmp_path, studies):
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["model"]["path"] = "/no/such/dir"
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(data))
    for command in ("start", "plan"):
        r = runner.invoke(app, [command, "--space", str(space)])
        assert r.exit_code == 2, r.output
        assert "model.path: /no/such/dir: no such directory" in r.output
    assert not studies.exists()


def test_plan_for_another_gpu_warns_and_plans(tmp_path, monkeypatch):
    """The model of a GPU space lives on the GPU host: `tune plan --gpu` here still plans it."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path))  # no qwen3-8b-random here
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    r = runner.invoke(app, ["plan", "--space", fixture_space("h200-transformers"), "--gpu", "h200-141gb",
                            "--samples", "1"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    assert "warning model.path: ${TUNER_CACHE}/models/qwen3-8b-random" in r.output
    assert "transformers serve" in r.output
    r = runner.invoke(app, ["plan", "--space", fixture_space("h200-transformers")])
    assert r.exit_code == 2 and "model.path: ${TUNER_CACHE}/models/qwen3-8b-random" in r.output


@pytest.mark.parametrize("space, gpu", [("a100-throughput", "a100-sxm-80gb"),
                                        ("h100-throughput", "h100-sxm-80gb"),
                                        ("h200-throughput", "h200-141gb"),
                                        ("rtx4090-24gb", "rtx-4090")])
def test_bundled_gpu_spaces_with_hub_ids_plan_without_a_warning(space, gpu, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    r = runner.invoke(app, ["plan", "--space", space, "--gpu", gpu, "--samples", "1"])
    assert r.exit_code == 0, r.output
    assert "warning" not in r.output
