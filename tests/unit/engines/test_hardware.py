"""Hardware: detection through NVML (faked here), the CPU fallback, and named profiles."""

import pytest

from tuner import fingerprint
from tuner.engines import hardware
from tuner.errors import InputError

A100_NVML = [{"index": i, "name": "NVIDIA A100-SXM4-80GB", "compute_capability": "8.0",
              "memory_mib": 81920, "driver": "550.54.15"} for i in range(2)]


@pytest.fixture
def fake_gpus(monkeypatch):
    def set_gpus(gpus):
        monkeypatch.setattr(fingerprint, "gpus", lambda: gpus)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return set_gpus


def test_detect_gpus(fake_gpus):
    fake_gpus(A100_NVML)
    hw = hardware.detect()
    assert (hw.kind, hw.gpu_name, hw.sm, hw.memory_mib, hw.count, hw.driver) == \
        ("gpu", "NVIDIA A100-SXM4-80GB", 80, 81920, 2, "550.54.15")
    assert hw.device_key == "sm80" == fingerprint.device_key()  # one key for trials and rules
    assert hw.describe() == "2 × NVIDIA A100-SXM4-80GB (SM 8.0, 80 GiB)"


@pytest.mark.parametrize("visible, count", [("0", 1), ("1", 1), ("0,1", 2), ("GPU-3f2a,GPU-9b1c", 2),
                                            ("", 0), ("0,1,2,3", 2)])
def test_detect_counts_only_the_visible_gpus(fake_gpus, monkeypatch, visible, count):
    """NVML lists the host's GPUs whatever CUDA_VISIBLE_DEVICES says; a worker pinned to one GPU
    (one worker per GPU on a shared study) must plan for one."""
    fake_gpus(A100_NVML)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert hardware.detect().count == count


def test_a_profile_with_a_gpu_count():
    two = hardware.profile("h200-141gb-x2")
    one = hardware.profile("h200-141gb")
    assert (two.count, one.count) == (2, 1)
    assert two.name == "h200-141gb" and two.device_key == one.device_key == "sm90"
    assert two.describe() == "2 × NVIDIA H200 (SM 9.0, 140 GiB)"
    assert hardware.resolve("a100-sxm-80gb-x8").count == 8
    for bad in ("cpu-avx2-x2", "h200-141gb-x0", "nope-x2"):
        with pytest.raises(InputError, match="NAME-xN"):
            hardware.profile(bad)


def test_detect_without_gpu_is_a_cpu_profile(fake_gpus):
    fake_gpus([])
    hw = hardware.detect()
    assert hw.kind == "cpu" and hw.sm is None and hw.count == 0
    assert hw.device_key == fingerprint.device_key() and hw.device_key.startswith("cpu")
    assert hw.source == "detected"


def test_this_machine_is_detected_without_error():
    hw = hardware.detect()
    assert hw.device_key == fingerprint.device_key()


@pytest.mark.parametrize("name, sm, gib, key", [
    ("a100-sxm-80gb", 80, 80, "sm80"),
    ("a100-pcie-40gb", 80, 40, "sm80"),
    ("h100-sxm-80gb", 90, 79.6, "sm90"),
    ("h200-141gb", 90, 140.4, "sm90"),
    ("l40s", 89, 45.0, "sm89"),
    ("rtx-4090", 89, 24.0, "sm89"),
    ("a10g", 86, 22.5, "sm86"),
    ("b200", 100, 179.1, "sm100"),
])
def test_gpu_profiles(name, sm, gib, key):
    hw = hardware.profile(name)
    assert (hw.kind, hw.sm, hw.device_key, hw.count, hw.source) == ("gpu", sm, key, 1, "profile")
    assert hw.memory_mib / 1024 == pytest.approx(gib, abs=0.1)


def test_cpu_profiles():
    assert hardware.profile("cpu").device_key == "cpu"
    avx2 = hardware.profile("cpu-avx2")
    assert (avx2.kind, avx2.cpu_flags, avx2.device_key) == ("cpu", ("avx2",), "cpu-avx2")


def test_unknown_profile_lists_the_known_ones():
    with pytest.raises(InputError) as err:
        hardware.profile("a100")
    msg = str(err.value)
    assert "unknown GPU profile 'a100'" in msg
    for name in ("a100-sxm-80gb", "a100-pcie-40gb", "h100-sxm-80gb", "h200-141gb", "l40s",
                 "rtx-4090", "a10g", "cpu"):
        assert name in msg


def test_resolve_prefers_the_named_profile(fake_gpus):
    fake_gpus(A100_NVML)
    assert hardware.resolve("h200-141gb").gpu_name == "NVIDIA H200"
    assert hardware.resolve(None).gpu_name == "NVIDIA A100-SXM4-80GB"


def test_a_broken_profile_file_names_the_profile(tmp_path, monkeypatch):
    bad = tmp_path / "gpus.yaml"
    bad.write_text("x100:\n  gpu_name: X\n  compute_capability: '9.0'\n")
    monkeypatch.setattr(hardware, "PROFILES_FILE", bad)
    hardware._profiles.cache_clear()
    try:
        with pytest.raises(InputError, match="x100.*memory_mib"):
            hardware.profile("x100")
    finally:
        hardware._profiles.cache_clear()
