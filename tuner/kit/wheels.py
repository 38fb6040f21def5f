"""The kit's wheels as files: downloaded once and checked against the index's sha256, then, only
when asked, re-zipped uncompressed (so that xz, not deflate, compresses the CUDA fat binaries) and
trimmed of named files (recorded inside the wheel, so the installed folder says what it lacks)."""

from __future__ import annotations

import fnmatch
import hashlib
import shutil
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path

import httpx
from packaging.utils import canonicalize_name

from tuner.engines.spec import KitTrim
from tuner.errors import InputError
from tuner.kit.resolve import Wheel

TRIM_NOTE = "TRIMMED.txt"


@dataclass(frozen=True)
class Removed:
    path: str
    size: int
    why: str


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def fetch(wheel: Wheel, cache: Path) -> Path:
    """The wheel from the index, verified; kept in ``cache`` by hash so a rebuild downloads nothing."""
    dest = cache / wheel.sha256 / wheel.filename
    if dest.exists() and sha256_of(dest) == wheel.sha256:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")
    if wheel.url.startswith("file://"):  # a local index or wheel folder that pip was configured with
        shutil.copyfile(Path(urllib.parse.unquote(urllib.parse.urlparse(wheel.url).path)), part)
    else:
        _download(wheel, part)
    if (digest := sha256_of(part)) != wheel.sha256:
        part.unlink(missing_ok=True)
        raise InputError(f"{wheel.filename}: sha256 {digest} does not match the index's {wheel.sha256}")
    part.replace(dest)
    return dest


def _download(wheel: Wheel, part: Path) -> None:
    try:
        with httpx.stream("GET", wheel.url, follow_redirects=True, timeout=60) as r, part.open("wb") as f:
            r.raise_for_status()
            for chunk in r.iter_bytes(1 << 20):
                f.write(chunk)
    except httpx.HTTPError as e:
        part.unlink(missing_ok=True)
        raise InputError(f"could not download {wheel.filename} from {wheel.url}: {e}") from None


def repack(src: Path, dest: Path, trims: list[KitTrim]) -> list[Removed]:
    """``src`` re-zipped uncompressed into ``dest``, less the files ``trims`` name. Member contents,
    order and RECORD's hashes stay as they were; a trimmed wheel's RECORD loses the removed files'
    lines and gains ``<dist-info>/TRIMMED.txt`` naming each one with its reason."""
    removed: list[Removed] = []
    with zipfile.ZipFile(src) as zin:
        infos = zin.infolist()
        record = next((i.filename for i in infos if i.filename.endswith(".dist-info/RECORD")), None)
        if record is None:
            raise InputError(f"{src.name}: no .dist-info/RECORD: not a wheel")
        for info in infos:
            why = next((t.why for t in trims for pat in t.files if fnmatch.fnmatch(info.filename, pat)), None)
            if why is not None and info.filename != record:
                removed.append(Removed(info.filename, info.file_size, why))
        for t in trims:
            for pat in t.files:
                if not any(fnmatch.fnmatch(r.path, pat) for r in removed):
                    raise InputError(f"trim pattern {pat!r} of {t.wheel} matches no file in {src.name}: "
                                     f"update the engine spec's kit.trim for this version")
        gone = {r.path for r in removed}
        tmp = dest.with_name(dest.name + ".part")
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED) as zout:
            for info in infos:
                if info.filename in gone:
                    continue
                data = zin.read(info)
                if info.filename == record and removed:
                    data = _trimmed_record(data, gone, record, removed)
                    note_name = record.rsplit("/", 1)[0] + "/" + TRIM_NOTE
                    zout.writestr(_stored(note_name, info), _note(removed))
                zout.writestr(_stored(info.filename, info), data)
    tmp.replace(dest)
    return removed


def _stored(name: str, like: zipfile.ZipInfo) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=like.date_time)
    info.external_attr = like.external_attr
    info.compress_type = zipfile.ZIP_STORED
    return info


def _note(removed: list[Removed]) -> bytes:
    lines = ["# Files removed from the upstream wheel by `tune engine kit --trim` (engine spec kit.trim):"]
    lines += [f"{r.path}\t{r.size}\t{r.why}" for r in removed]
    return ("\n".join(lines) + "\n").encode()


def _trimmed_record(data: bytes, gone: set[str], record: str, removed: list[Removed]) -> bytes:
    import base64

    note = _note(removed)
    digest = base64.urlsafe_b64encode(hashlib.sha256(note).digest()).rstrip(b"=").decode()
    note_name = record.rsplit("/", 1)[0] + "/" + TRIM_NOTE
    kept = [ln for ln in data.decode().splitlines() if ln and ln.split(",", 1)[0] not in gone]
    return ("\n".join([*kept, f"{note_name},sha256={digest},{len(note)}"]) + "\n").encode()


def trims_for(wheel: Wheel, trims: list[KitTrim]) -> list[KitTrim]:
    return [t for t in trims if canonicalize_name(t.wheel) == canonicalize_name(wheel.name)]
