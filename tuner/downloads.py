"""Datasets too large for the repository, fetched from their Hugging Face dataset repository.

huggingface_hub does the transfer, so a download gets what every engine already relies on for
weights: HF_TOKEN, HF_ENDPOINT for a mirror, the HF cache the engines mount, retries that resume a
cut transfer with a Range request, a size check, and a temporary file that only takes the real name
when whole. The client does not compare a fresh download with the sha256 the hub publishes for an
LFS file (its ETag, read with one HEAD before the transfer), so ``download`` does, and removes a file
that does not match: a space never reads a truncated or altered dataset.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from huggingface_hub import get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError

from tuner.errors import InputError
from tuner.paths import data_dir

_CHUNK = 1 << 20
_SHA256 = re.compile(r"[0-9a-f]{64}")
Progress = Callable[[int, int | None], None]  # (bytes on disk, total bytes if known)


class DownloadError(InputError):
    """The download cannot complete here; the message names the file, says why and what to do."""


@dataclass(frozen=True)
class KnownDataset:
    name: str
    repo_id: str  # a dataset repository on the hub
    file_name: str
    revision: str = "main"
    description: str = ""

    def url(self, endpoint: str | None = None) -> str:
        return hf_hub_url(self.repo_id, self.file_name, repo_type="dataset", revision=self.revision,
                          endpoint=endpoint)


DATASETS: dict[str, KnownDataset] = {
    "sharegpt": KnownDataset(
        name="sharegpt",
        repo_id="anon8231489123/ShareGPT_Vicuna_unfiltered",
        file_name="ShareGPT_V3_unfiltered_cleaned_split.json",
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


def offline_command(dataset: KnownDataset, target: Path) -> str:
    """What to run on a machine that reaches the hub, and where the file goes here."""
    return (f"tune data {dataset.name} --dir .\n  then copy {dataset.file_name} to {target}\n  "
            "(or set HF_ENDPOINT to a hub mirror this host reaches)")


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            digest.update(block)
    return digest.hexdigest()


def download(dataset: KnownDataset, folder: Path | None = None, *,
             progress: Progress | None = None, timeout_s: float = 10.0) -> Path:
    """Fetch ``dataset``, check its sha256 against the hub's, and return where spaces find it.

    Without ``folder`` the file goes to the HF cache and ``${TUNER_DATA}/<file>`` links to it (the
    path the bundled spaces name); with ``folder`` it is a plain file there. A file already in place
    is checked, not fetched again.
    """
    # huggingface_hub reads HF_ENDPOINT once, at import; reading it here honours a changed one.
    endpoint = os.environ.get("HF_ENDPOINT") or None
    link = None if folder is not None else data_dir() / dataset.file_name
    target = link or folder / dataset.file_name
    url = dataset.url(endpoint)
    try:
        etag = get_hf_file_metadata(url, timeout=timeout_s).etag
    except Exception as exc:  # noqa: BLE001 - the HTTP library's errors are not OSErrors
        raise DownloadError(_why(dataset, url, exc, target)) from None
    if etag is None or not _SHA256.fullmatch(etag):
        raise DownloadError(f"{url} publishes no sha256 for {dataset.file_name} (ETag {etag!r}), "
                            "so it cannot be verified")
    if link is not None and link.exists() and not link.is_symlink():
        _check(link, etag, dataset, url, remove=False)  # placed by hand, e.g. by offline_command
        return link
    try:
        path = Path(hf_hub_download(dataset.repo_id, dataset.file_name, repo_type="dataset",
                                    revision=dataset.revision, local_dir=folder, endpoint=endpoint,
                                    etag_timeout=timeout_s, tqdm_class=_reporter(progress)))
    except Exception as exc:  # noqa: BLE001 - as above
        raise DownloadError(_why(dataset, url, exc, target)) from None
    _check(path, etag, dataset, url, remove=True)
    if link is None:
        return path
    link.parent.mkdir(parents=True, exist_ok=True)
    staged = link.with_name(link.name + ".link")
    staged.unlink(missing_ok=True)
    staged.symlink_to(path)
    os.replace(staged, link)  # atomic: the old link or the new one, never none
    return link


def _check(path: Path, sha256: str, dataset: KnownDataset, url: str, *, remove: bool) -> None:
    """Compare with the hub's sha256; a fetched file that differs is removed (the blob behind a
    cache link too), since the client would hand the same bytes back on the next run."""
    got = sha256_of(path)
    if got == sha256:
        return
    if remove:
        blob = path.resolve()
        path.unlink()
        blob.unlink(missing_ok=True)
        what = "removed it; run again"
    else:
        what = f"{path} was kept: it was not downloaded by tune, move it away and retry"
    raise DownloadError(f"sha256 of {dataset.file_name} is {got}, but {url} publishes {sha256}: "
                        f"{what}")


def _why(dataset: KnownDataset, url: str, exc: Exception, target: Path) -> str:
    reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if isinstance(exc, HfHubHTTPError):
        return f"{url} refused {dataset.file_name}: {reason}"
    if isinstance(exc, OSError):  # a short transfer, a full disk: the client removed its partial file
        return f"downloading {dataset.file_name} failed: {reason}; run again"
    return (f"cannot download {dataset.file_name} from {urlsplit(url).netloc}: "
            f"{type(exc).__name__}: {reason}. On a machine that can reach it, run:\n  "
            + offline_command(dataset, target))


def _reporter(progress: Progress | None) -> type | None:
    """A stand-in for the tqdm class huggingface_hub draws its bar with (it takes any class with
    tqdm's ``update`` and context manager), reporting bytes on disk to ``progress``."""
    if progress is None:
        return None

    class Reporter:
        def __init__(self, *, total: int | None = None, initial: int = 0, **_: Any) -> None:
            self.done, self.total = initial, total
            progress(self.done, self.total)

        def __enter__(self) -> "Reporter":
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, n: int = 1) -> None:  # negative when a server ignored the Range
            self.done += n
            progress(self.done, self.total)

    return Reporter
