"""Predict where the performance model is installed, tune where the GPU is: the prior's predictions
saved by `tune plan --save-prior` (real aiconfigurator-core) and checked against the space that
`tune start --prior-file` uses them for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tuner.errors import InputError
from tuner.space import load_space
from tuner.study.knowledge import carried_predictions, save_predictions
from tests.helpers import SPACES, fixture_space, run_tune

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: pip install 'tuner[estimate]'")


@pytest.fixture
def qwen3_14b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The h200-engines space's model: the published Qwen3-14B config.json under the cache."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))
    model = tmp_path / "cache" / "models" / "qwen3-14b-shape"
    assert run_tune("model", "tiny", str(model), "--shape", "qwen3-14b", "--no-weights").returncode == 0
    return model


def test_saved_predictions_steer_the_same_space_and_rank_online_fp8_first(qwen3_14b: Path, tmp_path: Path) -> None:
    space = load_space(fixture_space("h200-engines"))
    path = tmp_path / "prior.json"
    saved = save_predictions(space, path)
    found = carried_predictions(space, path)
    assert len(found.predictions) == len(saved.predictions) > 0
    assert found.sources[0]["carried_from"] == str(path) and found.sources[0]["gpu"] == "h200-141gb"
    best = max(found.predictions, key=lambda p: p.value)
    assert best.params["quantization"] == "fp8"  # measured best: docs/findings/h200-vllm-tuned.md
    assert found.model_pick is not None and found.model_pick.params == best.params


def test_predictions_for_another_space_or_file_are_refused(qwen3_14b: Path, tmp_path: Path) -> None:
    space = load_space(fixture_space("h200-engines"))
    path = tmp_path / "prior.json"
    save_predictions(space, path)
    doc = json.loads(path.read_text())
    doc["engines"] = ["vllm"]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"made for engines \['vllm'\], this study's is \['sglang', 'vllm'\]"):
        carried_predictions(space, other)
    other.write_text("[1, 2]")
    with pytest.raises(InputError, match="not a predictions file"):
        carried_predictions(space, other)
    with pytest.raises(InputError, match="does not exist"):
        carried_predictions(space, tmp_path / "missing.json")


def test_plan_saves_them_and_refuses_a_space_without_a_prior(qwen3_14b: Path, tmp_path: Path) -> None:
    out = tmp_path / "p.json"
    proc = run_tune("plan", "--space", fixture_space("h200-engines"), "--gpu", "h200-141gb", "--samples", "0", "--save-prior", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "saved" in proc.stdout and json.loads(out.read_text())["space"] == "h200-engines"
    data = yaml.safe_load((SPACES / "h200-vllm.yaml").read_text())
    data.pop("prior")
    no_prior = tmp_path / "no-prior.yaml"
    no_prior.write_text(yaml.safe_dump(data))
    proc = run_tune("plan", "--space", str(no_prior), "--gpu", "h200-141gb", "--samples", "0", "--save-prior", str(out))
    assert proc.returncode == 2 and "has no prior: section" in proc.stderr and "Traceback" not in proc.stderr


def test_no_prediction_at_all_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The space's model folder not written yet (`tune model tiny` not run): the refusal names the
    checkpoint the model could not read, and no file is written."""
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "empty-cache"))
    path = tmp_path / "prior.json"
    with pytest.raises(InputError, match=r"predicted no config: .*config\.json .*qwen3-14b-shape"):
        save_predictions(load_space(fixture_space("h200-vllm")), path)
    assert not path.exists()
