"""`tune model tiny --shape`: the published config.json of each Qwen3 size (so a dummy-weight
benchmark costs what the real model costs) with the small local tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from tests.helpers import run_tune

# From each model's config.json on the Hugging Face hub (Qwen/Qwen3-*).
PUBLISHED = {
    "qwen3-0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                       intermediate_size=3072, tie_word_embeddings=True),
    "qwen3-8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
                     intermediate_size=12288, tie_word_embeddings=False),
    "qwen3-14b": dict(hidden_size=5120, num_hidden_layers=40, num_attention_heads=40,
                      intermediate_size=17408, tie_word_embeddings=False),
    "qwen3-32b": dict(hidden_size=5120, num_hidden_layers=64, num_attention_heads=64,
                      intermediate_size=25600, tie_word_embeddings=False),
}


@pytest.mark.parametrize("shape", sorted(PUBLISHED))
def test_published_shape_with_the_local_tokenizer(tmp_path: Path, shape: str) -> None:
    out = tmp_path / shape
    proc = run_tune("model", "tiny", str(out), "--shape", shape)   # published shapes: no weights by default
    assert proc.returncode == 0, proc.stderr
    assert "--load-format dummy" in proc.stdout
    cfg = json.loads((out / "config.json").read_text())
    assert {k: cfg[k] for k in PUBLISHED[shape]} == PUBLISHED[shape]
    assert cfg["vocab_size"] == 151936 and cfg["num_key_value_heads"] == 8 and cfg["head_dim"] == 128
    assert cfg["max_position_embeddings"] == 40960 and cfg["architectures"] == ["Qwen3ForCausalLM"]
    assert "quantization_config" not in cfg
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    assert tok.get_vocab_size() < cfg["vocab_size"]          # the small local tokenizer
    assert cfg["eos_token_id"] < tok.get_vocab_size()        # its own special tokens, not the hub's
    assert not list(out.glob("*.safetensors"))


def test_unknown_shape_names_the_choices(tmp_path: Path) -> None:
    proc = run_tune("model", "tiny", str(tmp_path / "m"), "--shape", "qwen3-99b", "--no-weights")
    assert proc.returncode == 2 and "qwen3-14b" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "m").exists()


# The quantized checkpoints' quantization_config as published on the hub (Qwen/Qwen3-14B-FP8,
# Qwen/Qwen3-14B-AWQ and their 8B and 32B siblings): what makes an engine build FP8 block-scaled or
# AWQ layers for a dummy-weight launch.
FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic", "fmt": "e4m3", "weight_block_size": [128, 128]}
AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm",
       "modules_to_not_convert": None}


@pytest.mark.parametrize("size", ["qwen3-8b", "qwen3-14b", "qwen3-32b"])
@pytest.mark.parametrize(("suffix", "quant", "dtype"), [("fp8", FP8, "bfloat16"), ("awq", AWQ, "float16")])
def test_quantized_checkpoint_shape(tmp_path: Path, size: str, suffix: str, quant: dict, dtype: str) -> None:
    out = tmp_path / f"{size}-{suffix}"
    proc = run_tune("model", "tiny", str(out), "--shape", f"{size}-{suffix}")
    assert proc.returncode == 0, proc.stderr
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["quantization_config"] == quant
    assert cfg["torch_dtype"] == dtype
    assert {k: cfg[k] for k in PUBLISHED[size]} == PUBLISHED[size]
    assert not list(out.glob("*.safetensors"))


def test_quantized_shape_refuses_random_weights(tmp_path: Path) -> None:
    proc = run_tune("model", "tiny", str(tmp_path / "m"), "--shape", "qwen3-14b-awq", "--weights")
    assert proc.returncode == 2 and "--load-format dummy" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "m").exists()


def test_weights_too_large_for_this_machine_are_refused_with_the_size(tmp_path: Path) -> None:
    """32B parameters are 64 GB in bfloat16, more than half of any CI machine's memory: refused
    before anything is built, naming the size and the flag."""
    proc = run_tune("model", "tiny", str(tmp_path / "m"), "--shape", "qwen3-32b", "--weights")
    assert proc.returncode == 2, proc.stderr
    assert "GiB" in proc.stderr and "--no-weights" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "m").exists()


def test_parameter_count_of_the_published_shapes() -> None:
    """Qwen's model cards: Qwen3-8B 8.2B, Qwen3-14B 14.8B, Qwen3-32B 32.8B parameters."""
    from tuner.engines.model_config import published_shape
    from tuner.tiny_model import parameter_count
    for hub, billions in {"Qwen/Qwen3-8B": 8.2, "Qwen/Qwen3-14B": 14.8, "Qwen/Qwen3-32B": 32.8}.items():
        assert round(parameter_count(published_shape(hub)) / 1e9, 1) == billions
