"""No secret reaches the study: a real vLLM started with --api-key and an HF_TOKEN in its env,
then the study database and every stored file are searched for both values."""

from __future__ import annotations

import stat

import pytest

from tests.helpers import load, run_tune, space_file

pytestmark = pytest.mark.engine
API_KEY = "sk-tuner-test-7f3a9c2e51"
HF_TOKEN = "hf_tunerTestToken8d21b4"


def test_api_key_and_tokens_are_redacted_everywhere(tmp_path, studies, vllm_bin, tiny_model_path):
    space = space_file(tmp_path, "secrets", fixed_args=["--api-key", API_KEY])
    text = space.read_text().replace("VLLM_NO_USAGE_STATS: '1'",
                                     f"VLLM_NO_USAGE_STATS: '1'\n      HF_TOKEN: {HF_TOKEN}")
    assert HF_TOKEN in text
    space.write_text(text)
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (t,) = load(studies, "secrets").trials
    assert t.user_attrs["completed"] > 0  # the benchmark authenticated with the engine's key
    assert "***" in t.user_attrs["argv"] and t.user_attrs["env_vars"]["HF_TOKEN"] == "***"
    for path in studies.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert API_KEY.encode() not in data, path
            assert HF_TOKEN.encode() not in data, path
    assert API_KEY not in proc.stdout + proc.stderr
    assert stat.S_IMODE(studies.stat().st_mode) == 0o700
    assert stat.S_IMODE((studies / "secrets.db").stat().st_mode) == 0o600
