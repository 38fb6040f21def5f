"""A kit on disk: the manifest pip installs from, the list of what was left out and why, one
``.tar.xz`` of the wheels cut into parts no larger than a transfer allows, their sha256 sums, and
the install script that checks all of it on the host."""

from __future__ import annotations

import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import asdict, dataclass
from importlib.resources import files
from pathlib import Path

from tuner.engines.spec import Kit
from tuner.errors import InputError
from tuner.files import write_atomic
from tuner.kit.resolve import Resolution
from tuner.kit.wheels import Removed, fetch, repack, sha256_of, trims_for


@dataclass(frozen=True)
class Carried:
    """A wheel as it travels: its file, sha256 and size, and how it differs from the index's."""

    name: str
    version: str
    filename: str
    sha256: str
    size: int
    upstream_sha256: str
    why: str
    removed: tuple[Removed, ...] = ()


def parse_size(text: str) -> int:
    """``60M``, ``60MiB``, ``1G``, ``500000``: bytes. Sizes are binary (M = MiB)."""
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    unit = t[-1] if t and t[-1] in units else ""
    try:
        n = float(t[:-1] if unit else t)
    except ValueError:
        raise InputError(f"--split {text!r} is not a size (e.g. 60M)") from None
    if n <= 0:
        raise InputError(f"--split {text!r} must be positive")
    return int(n * units[unit])


def write_plan(out: Path, engine: str, res: Resolution) -> None:
    """What a dry run writes: the resolution, with the index's hashes, and nothing downloaded."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "manifest.txt", _manifest([(w.name, w.version, w.filename, w.sha256, w.why)
                                                    for w in res.wheels]))
    write_atomic(out / "left-out.txt", _left_out(res))
    write_atomic(out / "kit.json", json.dumps(_kit_doc(engine, res, None), indent=2) + "\n")


def build(out: Path, engine: str, kit: Kit, res: Resolution, *, cache: Path, split: int | None,
          trim: bool) -> list[Path]:
    """Download, verify, repack uncompressed (optionally trimmed), pack and split; returns the
    parts in order."""
    out.mkdir(parents=True, exist_ok=True)
    stale = [p for p in out.iterdir() if p.name.startswith(f"{_kit_name(res)}.part")]
    for p in stale:
        p.unlink()
    carried: list[Carried] = []
    with tempfile.TemporaryDirectory(prefix="tuner-kit-", dir=out) as tmp:
        wheels = Path(tmp) / "wheels"
        wheels.mkdir()
        for w in res.wheels:
            src = fetch(w, cache)
            dest = wheels / w.filename
            removed = repack(src, dest, trims_for(w, kit.trim) if trim else [])
            carried.append(Carried(w.name, w.version, w.filename, sha256_of(dest), dest.stat().st_size,
                                   w.sha256, w.why, tuple(removed)))
        manifest = _manifest([(c.name, c.version, c.filename, c.sha256, c.why) for c in carried])
        (Path(tmp) / "manifest.txt").write_text(manifest)
        doc = _kit_doc(engine, res, carried)
        (Path(tmp) / "kit.json").write_text(json.dumps(doc, indent=2) + "\n")
        tar_path = Path(tmp) / "kit.tar"
        with tarfile.open(tar_path, "w") as tar:
            for name in ("manifest.txt", "kit.json"):
                tar.add(Path(tmp) / name, arcname=name)
            tar.add(wheels, arcname="wheels")
        if shutil.which("xz") is None:
            raise InputError("xz is not on PATH: install it (Debian/Ubuntu: apt-get install xz-utils)")
        # -9e: CUDA fat binaries in stored wheels shrink several times more than deflate makes them.
        subprocess.run(["xz", "-T0", "-9e", "-k", str(tar_path)], check=True)
        whole = out / _kit_name(res)
        shutil.move(str(tar_path) + ".xz", whole)
    parts = _split(whole, split)
    sums = [f"{sha256_of(p)}  {p.name}" for p in parts] + [f"{sha256_of(whole)}  {whole.name}"]
    whole.unlink()
    write_atomic(out / "SHA256SUMS", "\n".join(sums) + "\n")
    write_atomic(out / "manifest.txt", manifest)
    write_atomic(out / "left-out.txt", _left_out(res))
    write_atomic(out / "kit.json", json.dumps(doc, indent=2) + "\n")
    _write_installer(out / "install.sh", engine, kit.package, res, whole.name)
    return parts


def _kit_name(res: Resolution) -> str:
    return res.requirement.replace("==", "-") + ".tar.xz"


def _split(whole: Path, size: int | None) -> list[Path]:
    parts, n = [], 0
    with whole.open("rb") as f:
        while chunk := f.read(size or whole.stat().st_size or 1):
            p = whole.with_name(f"{whole.name}.part{n:02d}")
            p.write_bytes(chunk)
            parts.append(p)
            n += 1
    return parts


def _manifest(rows: list[tuple[str, str, str, str, str]]) -> str:
    lines = ["# pip requirements with hashes of the wheels as carried; install.sh installs from it",
             "# (--no-index --no-deps --require-hashes). name==version --hash  # file: why it is in the kit"]
    lines += [f"{n}=={v} --hash=sha256:{h}  # {f}: {why}" for n, v, f, h, why in rows]
    return "\n".join(lines) + "\n"


def _left_out(res: Resolution) -> str:
    lines = [f"# Required by {res.requirement} (transitively) but not in the kit, and why. "
             f"Host: {Path(res.host_file).name if res.host_file else 'the given package list'}"]
    lines += [f"{x.name}=={x.version}\t{x.why}" for x in res.left_out]
    return "\n".join(lines) + "\n"


def _kit_doc(engine: str, res: Resolution, carried: list[Carried] | None) -> dict:
    doc = {"engine": engine, "requirement": res.requirement, "python_version": res.python_version,
           "platforms": list(res.platforms), "host_packages": res.host_file,
           "wheels": [asdict(w) for w in res.wheels] if carried is None else [asdict(c) for c in carried],
           "left_out": [asdict(x) for x in res.left_out]}
    if carried is not None:
        doc["trimmed"] = [{"wheel": c.filename, **asdict(r)} for c in carried for r in c.removed]
    return doc


def _write_installer(path: Path, engine: str, package: str, res: Resolution, kit_name: str) -> None:
    version = res.requirement.split("==", 1)[1] if "==" in res.requirement else ""
    text = (files("tuner.kit") / "install.sh").read_text()
    for key, value in {"KIT_NAME": kit_name, "ENGINE": engine, "PACKAGE": package, "VERSION": version}.items():
        text = text.replace(f"@{key}@", value)
    write_atomic(path, text)
    path.chmod(0o755)
