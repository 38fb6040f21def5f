"""A kit end to end without the network: real wheels made here, packed, trimmed, split into parts,
and installed by the kit's own install.sh, which must refuse a damaged, missing or foreign part."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tuner.engines.installed import folder_launch, read_record
from tuner.engines.spec import Kit, KitTrim, load_engine
from tuner.errors import InputError
from tuner.kit.pack import build, parse_size
from tuner.kit.resolve import Resolution, Wheel
from tuner.kit.wheels import sha256_of


def _wheel(out: Path, name: str, version: str, files: dict[str, bytes]) -> Path:
    """A pure-Python wheel pip installs: METADATA, WHEEL and a RECORD with every file's hash."""
    dist = f"{name}-{version}.dist-info"
    members = {**files,
               f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
               f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    for path, data in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    record.append(f"{dist}/RECORD,,")
    path = out / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, data in members.items():
            z.writestr(p, data)
        z.writestr(f"{dist}/RECORD", "\n".join(record) + "\n")
    return path


@pytest.fixture
def kit(tmp_path: Path) -> Path:
    """The kit of a made-up release 'vllm==9.9.9' (so the real vLLM spec's installed: data
    applies to the folder) with one dependency; the wheels sit in the download cache by hash, as
    `fetch` leaves them, so nothing is downloaded."""
    src = tmp_path / "src"
    src.mkdir()
    blob = os.urandom(300_000)  # incompressible: the kit splits into several parts
    wheels = [_wheel(src, "vllm", "9.9.9", {"vllm/__init__.py": b"__version__ = '9.9.9'\n",
                                           "vllm/big_kernel.so": blob,
                                           "vllm/third_party/other/x.h": b"header\n"}),
              _wheel(src, "tinydep", "1.0", {"tinydep.py": b"VALUE = 42\n"})]
    cache = tmp_path / "cache"
    entries = []
    for w in wheels:
        sha = sha256_of(w)
        (cache / sha).mkdir(parents=True)
        (cache / sha / w.name).write_bytes(w.read_bytes())
        name, version = w.name.split("-")[:2]
        entries.append(Wheel(name, version, w.name, f"https://example.invalid/{w.name}", sha, "not on the host"))
    res = Resolution("vllm==9.9.9", tuple(entries), (), "host.txt", "3.12", ("manylinux_2_39_x86_64",))
    trim = [KitTrim(wheel="vllm", files=["vllm/big_kernel.so", "vllm/third_party/other/*"], why="not used here")]
    kit_spec = Kit(package="vllm", trim=trim, source="test")
    out = tmp_path / "kit"
    parts = build(out, "vllm", kit_spec, res, cache=cache, split=parse_size("64K"), trim=True)
    assert len(parts) >= 1
    return out


def _install(kit: Path, target: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(kit / "install.sh"), "--target", str(target),
                           "--python", sys.executable, *extra], capture_output=True, text=True, check=False)


def test_kit_installs_into_an_empty_folder_with_the_trim_recorded(kit: Path, tmp_path: Path) -> None:
    target = tmp_path / "engine"
    proc = _install(kit, target)
    assert proc.returncode == 0, proc.stderr
    assert "parts verified" in proc.stdout and "kit verified" in proc.stdout
    assert (target / "vllm" / "__init__.py").exists() and (target / "tinydep.py").exists()
    assert not (target / "vllm" / "big_kernel.so").exists()
    note = (target / "vllm-9.9.9.dist-info" / "TRIMMED.txt").read_text()
    assert "vllm/big_kernel.so\t300000\tnot used here" in note and "vllm/third_party/other/x.h" in note
    doc = json.loads((kit / "kit.json").read_text())
    assert {t["path"] for t in doc["trimmed"]} == {"vllm/big_kernel.so", "vllm/third_party/other/x.h"}
    rec = read_record(target)
    assert (rec.engine, rec.package, rec.version, rec.python) == ("vllm", "vllm", "9.9.9", sys.executable)
    # pip's own check: the installed RECORD lists no file that the trim removed
    assert "big_kernel" not in (target / "vllm-9.9.9.dist-info" / "RECORD").read_text()


def test_folder_launch_applies_the_specs_offline_data(kit: Path, tmp_path: Path) -> None:
    target = tmp_path / "engine"
    assert _install(kit, target).returncode == 0
    launch = folder_launch(load_engine("vllm"), target)
    assert launch.command == [f"{target}/bin/vllm", "serve"]
    assert launch.env["PYTHONPATH"] == str(target)
    assert launch.env["HF_HUB_OFFLINE"] == "1"
    assert launch.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"  # the folder has no flashinfer
    (target / "flashinfer").mkdir()
    assert "VLLM_USE_FLASHINFER_SAMPLER" not in folder_launch(load_engine("vllm"), target).env
    with pytest.raises(InputError, match="holds vllm 9.9.9, not sglang"):
        folder_launch(load_engine("sglang"), target)


def test_install_refuses_a_damaged_part(kit: Path, tmp_path: Path) -> None:
    part = sorted(kit.glob("*.part*"))[0]
    data = bytearray(part.read_bytes())
    data[100] ^= 0xFF
    part.write_bytes(bytes(data))
    proc = _install(kit, tmp_path / "engine")
    assert proc.returncode == 2 and "a part is damaged" in proc.stderr
    assert not (tmp_path / "engine").exists()


def test_install_refuses_a_missing_part_and_a_used_folder(kit: Path, tmp_path: Path) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "old.py").write_text("")
    proc = _install(kit, used)
    assert proc.returncode == 2 and "is not empty" in proc.stderr
    part = sorted(kit.glob("*.part*"))[-1]
    part.unlink()
    proc = _install(kit, tmp_path / "engine")
    assert proc.returncode == 2 and f"part {part.name} is missing" in proc.stderr


def test_install_refuses_parts_of_another_kit(kit: Path, tmp_path: Path) -> None:
    """Each part matches its own line in SHA256SUMS, but the whole does not: parts of two builds."""
    sums = (kit / "SHA256SUMS").read_text().splitlines()
    whole = sums[-1].split()[1]
    sums[-1] = f"{'0' * 64}  {whole}"
    (kit / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    proc = _install(kit, tmp_path / "engine")
    assert proc.returncode == 2 and "does not match its sha256" in proc.stderr


@pytest.mark.parametrize("text,size", [("60M", 60 << 20), ("50MiB", 50 << 20), ("1G", 1 << 30), ("4096", 4096)])
def test_split_sizes(text: str, size: int) -> None:
    assert parse_size(text) == size


def test_split_size_errors_name_the_input() -> None:
    with pytest.raises(InputError, match="--split 'lots'"):
        parse_size("lots")
