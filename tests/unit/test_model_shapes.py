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
    proc = run_tune("model", "tiny", str(out), "--shape", shape, "--no-weights")
    assert proc.returncode == 0, proc.stderr
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
