"""Datasets too large for the repository, fetched once into the data folder (``${TUNER_DATA}``).

A download streams into ``<file>.part`` and resumes it with a Range request after an interruption;
the file gets its real name only after its sha256 matched the pinned one (an atomic rename), so a
space never reads a truncated or corrupted dataset. On a host that cannot reach the source, the
error gives the exact command to run elsewhere and where to put the file.
"""

from __future__ import annotations

import hashlib
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from tuner.errors import InputError
from tuner.paths import data_dir

# The ShareGPT file of the motivating study (vllm bench serve's --dataset-name sharegpt). Its size and
# sha256 could not be read from any package or document on the machine where this was written (no
# access to the Hub). They MUST be filled from the file's published Git LFS pointer ("oid sha256:",
# "size" on https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/blob/main/
# ShareGPT_V3_unfiltered_cleaned_split.json); until then `tune data sharegpt` refuses to run unless
# --no-verify is given.
SHAREGPT_SHA256: str | None = None
SHAREGPT_SIZE: int | None = None

_CHUNK = 1 << 20
Progress = Callable[[int, int | None], None]  # (bytes on disk, total bytes if known)


class DownloadError(InputError):
    """The download cannot complete here; the message says why and what to do instead."""


@dataclass(frozen=True)
class KnownDataset:
    name: str
    url: str
    file_name: str
    size: int | None
    sha256: str | None
    description: str = ""


DATASETS: dict[str, KnownDataset] = {
    "sharegpt": KnownDataset(
        name="sharegpt",
        url=("https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/resolve/"
             "main/ShareGPT_V3_unfiltered_cleaned_split.json"),
        file_name="ShareGPT_V3_unfiltered_cleaned_split.json",
        size=SHAREGPT_SIZE,
        sha256=SHAREGPT_SHA256,
        description="ShareGPT conversations, the dataset of vllm bench serve and the motivating study",
    ),
}


def known(name: str) -> KnownDataset:
    try:
        return DATASETS[name]
    except KeyError:
        raise InputError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)}") from None


def known_for_path(path: str | Path) -> KnownDataset | None:
    """The known dataset a space's ``dataset_path`` names (by file name), so a missing file can be
    fetched with ``tune data NAME``."""
    return next((d for d in DATASETS.values() if d.file_name == Path(path).name), None)


def offline_command(dataset: KnownDataset, folder: Path | None = None) -> str:
    """What to run on a machine that reaches the source, and where the file goes here."""
    target = (folder or data_dir()) / dataset.file_name
    lines = [f"curl -fL -C - -o {shlex.quote(dataset.file_name)} {shlex.quote(dataset.url)}"]
    if dataset.sha256:
        lines.append(f"echo '{dataset.sha256}  {dataset.file_name}' | sha256sum -c -")
    lines.append(f"then copy it to {target}")
    return "\n  ".join(lines)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def download(dataset: KnownDataset, folder: Path | None = None, *, verify: bool = True,
             progress: Progress | None = None, timeout_s: float = 30.0) -> Path:
    """Fetch ``dataset`` into ``folder`` (the data folder by default) and return its path.

    An existing file is kept (after checking its sha256 when ``verify``). ``verify=False`` is the
    only way to download a dataset without a pinned checksum.
    """
    folder = folder or data_dir()
    target = folder / dataset.file_name
    if verify and not dataset.sha256:
        raise DownloadError(
            f"dataset {dataset.name!r} has no pinned sha256 in this version of tuner, so the "
            "download cannot be verified; pass --no-verify to fetch it unverified, or pin its "
            "sha256 in tuner/downloads.py (DATASETS) from the file's published LFS pointer")
    if target.exists():
        if verify:
            _check(target, dataset, keep_hint="it was not downloaded by tune: move it away and retry")
        return target
    folder.mkdir(parents=True, exist_ok=True)
    part = target.with_name(target.name + ".part")
    _fetch(dataset, part, folder, progress or (lambda done, total: None), timeout_s)
    if dataset.size is not None and part.stat().st_size != dataset.size:
        got = part.stat().st_size
        if got > dataset.size:
            part.unlink()  # more bytes than the file has: no resume can repair it
        raise DownloadError(f"{dataset.url} gave {got} bytes, expected {dataset.size}"
                            + ("; run again to resume" if got < dataset.size else "; removed it"))
    if verify:
        _check(part, dataset, keep_hint=None)
    os.replace(part, target)  # atomic: the dataset appears whole or not at all
    return target


def _fetch(dataset: KnownDataset, part: Path, folder: Path, progress: Progress,
           timeout_s: float) -> None:
    """Stream the file into ``part``, resuming from its current size."""
    offset = part.stat().st_size if part.exists() else 0
    headers = {"Range": f"bytes={offset}-"} if offset else {}
    timeout = httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0))
    try:
        with httpx.stream("GET", dataset.url, headers=headers, timeout=timeout,
                          follow_redirects=True) as response:
            if response.status_code == 416 and offset:
                return  # the part is whole already: the checks below decide
            if response.status_code not in (200, 206):
                raise DownloadError(f"{dataset.url} answered {response.status_code} "
                                    f"{response.reason_phrase}; fetch it elsewhere:\n  "
                                    + offline_command(dataset, folder))
            if response.status_code == 200:
                offset = 0  # the server ignored the Range: start over
            elif not response.headers.get("content-range", "").startswith(f"bytes {offset}-"):
                raise DownloadError(f"{dataset.url} resumed at the wrong offset "
                                    f"({response.headers.get('content-range')!r}, wanted {offset})")
            length = response.headers.get("content-length")
            total = offset + int(length) if length and length.isdigit() else dataset.size
            done = offset
            with open(part, "r+b" if offset else "wb") as f:
                f.seek(offset)
                f.truncate()
                for block in response.iter_bytes():
                    f.write(block)
                    done += len(block)
                    progress(done, total)
                f.flush()
                os.fsync(f.fileno())
    except httpx.TransportError as exc:
        host = urlsplit(dataset.url).netloc
        kept = f" ({part.stat().st_size} bytes kept in {part}: run again to resume)" \
            if part.exists() and part.stat().st_size else ""
        raise DownloadError(f"cannot download from {host}: {exc or type(exc).__name__}{kept}. "
                            "On a machine that can reach it, run:\n  "
                            + offline_command(dataset, folder)) from None


def _check(path: Path, dataset: KnownDataset, keep_hint: str | None) -> None:
    """Compare the sha256; a finished ``.part`` that does not match is removed, since resuming
    appends to it and can never repair a wrong prefix."""
    got = sha256_of(path)
    if got == dataset.sha256:
        return
    if keep_hint is None:
        path.unlink()
        what = f"removed {path.name} (a resume would only append to the wrong bytes); run again"
    else:
        what = f"{path} was kept: {keep_hint}"
    raise DownloadError(f"sha256 of {dataset.file_name} is {got}, expected {dataset.sha256} "
                        f"(from {dataset.url}): {what}")
