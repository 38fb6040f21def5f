"""`tuner.downloads` and `tune data` against a local hub: a threaded HTTP server on 127.0.0.1 that
answers HEAD and GET on /datasets/{repo}/resolve/{revision}/{file} with the headers huggingface_hub
reads (X-Repo-Commit, ETag and X-Linked-Etag = the LFS sha256, X-Linked-Size, Range), reached through
HF_ENDPOINT: a download into the HF cache and into --dir, a cut transfer resumed, a body that does not
match the published sha256, an unreachable host."""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import huggingface_hub.constants
import pytest

from tests.helpers import REPO
from tuner import downloads
from tuner.downloads import DownloadError, KnownDataset

PAYLOAD = os.urandom(700_000)
SHA = hashlib.sha256(PAYLOAD).hexdigest()
SAMPLE = KnownDataset(name="sample", repo_id="tuner-tests/sample", file_name="sample.json")
SHAREGPT = downloads.known("sharegpt")
SHAREGPT_BODY = json.dumps([{"id": "1", "conversations": [{"from": "human", "value": "hi"}]}]).encode()


class _Hub(BaseHTTPRequestHandler):
    files: ClassVar[dict[str, tuple[bytes, str]]] = {}  # resolve path -> (body served, sha256 published)
    requests: ClassVar[list[tuple[str, str | None]]] = []
    cut_at: ClassVar[int | None] = None  # the first GET stops after this many bytes

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_GET(self) -> None:
        self._answer(head=False)

    def _answer(self, head: bool) -> None:
        rng = self.headers.get("Range")
        type(self).requests.append((self.command, rng))
        if self.path not in self.files:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body, sha = self.files[self.path]
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        start = int(m.group(1)) if m and not head else 0
        self.send_response(206 if start else 200)
        self.send_header("X-Repo-Commit", "0123456789abcdef0123456789abcdef01234567")
        self.send_header("ETag", f'"{sha}"')
        self.send_header("X-Linked-Etag", f'"{sha}"')
        self.send_header("X-Linked-Size", str(len(body)))
        self.send_header("Accept-Ranges", "bytes")
        if start:
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", str(len(body) - start))
        self.end_headers()
        if head:
            return
        if type(self).cut_at is not None:
            self.wfile.write(body[start:type(self).cut_at])
            type(self).cut_at = None
            self.close_connection = True
            return
        self.wfile.write(body[start:])

    def log_message(self, *args: object) -> None:
        pass


def _resolve(dataset: KnownDataset) -> str:
    return f"/datasets/{dataset.repo_id}/resolve/{dataset.revision}/{dataset.file_name}"


def _gets() -> list[str | None]:
    return [rng for method, rng in _Hub.requests if method == "GET"]


@pytest.fixture
def hub(monkeypatch, tmp_path):
    _Hub.files = {_resolve(SAMPLE): (PAYLOAD, SHA), _resolve(SHAREGPT): (SHAREGPT_BODY, hashlib.sha256(SHAREGPT_BODY).hexdigest())}
    _Hub.requests, _Hub.cut_at = [], None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    endpoint = f"http://127.0.0.1:{httpd.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setenv("TUNER_DATA", str(tmp_path / "data"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    yield endpoint
    httpd.shutdown()
    httpd.server_close()


def _leftovers(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()
            and (p.name.endswith(".incomplete") or p.parent.name == "blobs" or p.name == "sample.json")]


def test_the_file_lands_in_the_hf_cache_linked_from_the_data_folder(hub, tmp_path):
    seen = []
    path = downloads.download(SAMPLE, progress=lambda done, total: seen.append((done, total)))
    assert path == tmp_path / "data" / "sample.json" and path.is_symlink()
    assert path.resolve().is_relative_to(tmp_path / "hf") and path.read_bytes() == PAYLOAD
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD)) and len(seen) > 1
    assert downloads.download(SAMPLE) == path  # cached: checked again, not fetched again
    assert _gets() == [None]


def test_dir_gets_a_plain_file_and_nothing_half_written(hub, tmp_path):
    path = downloads.download(SAMPLE, tmp_path / "here")
    assert path == tmp_path / "here" / "sample.json" and not path.is_symlink()
    assert path.read_bytes() == PAYLOAD
    assert not [p for p in (tmp_path / "here").rglob("*.incomplete")]


def test_a_cut_transfer_resumes_with_a_range(hub, tmp_path, monkeypatch):
    # The client resumes from the last whole chunk it wrote (10 MiB); smaller chunks keep the test small.
    monkeypatch.setattr(huggingface_hub.constants, "DOWNLOAD_CHUNK_SIZE", 50_000)
    _Hub.cut_at = 250_000
    path = downloads.download(SAMPLE, tmp_path / "here")
    assert _gets() == [None, "bytes=250000-"]
    assert path.read_bytes() == PAYLOAD


@pytest.mark.parametrize("into", ["cache", "dir"])
def test_a_body_that_does_not_match_the_published_sha256_is_rejected(hub, tmp_path, into):
    altered = bytes([PAYLOAD[0] ^ 1]) + PAYLOAD[1:]  # right size: the client's own check passes
    _Hub.files[_resolve(SAMPLE)] = (altered, SHA)
    folder = tmp_path / "here" if into == "dir" else None
    with pytest.raises(DownloadError, match=f"sha256 of sample.json is {hashlib.sha256(altered).hexdigest()}, "
                       f"but {hub}/datasets/tuner-tests/sample/resolve/main/sample.json publishes {SHA}: "
                       "removed it"):
        downloads.download(SAMPLE, folder)
    assert _leftovers(tmp_path) == []
    assert not (tmp_path / "data" / "sample.json").exists()


def test_a_file_copied_by_hand_is_checked_not_fetched(hub, tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "sample.json").write_bytes(PAYLOAD)
    assert downloads.download(SAMPLE) == tmp_path / "data" / "sample.json"
    assert _gets() == []


def test_unreachable_host_names_the_file_and_the_command_to_run_elsewhere(monkeypatch, tmp_path):
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(DownloadError) as err:
        downloads.download(SAMPLE, tmp_path / "here")
    text = str(err.value)
    assert f"cannot download sample.json from 127.0.0.1:{port}: ConnectError" in text
    assert "tune data sample --dir ." in text
    assert f"then copy sample.json to {tmp_path / 'here' / 'sample.json'}" in text
    assert not (tmp_path / "here").exists()


def _tune_data(tmp_path: Path, endpoint: str, *args: str, hf_home: str = "hf") -> subprocess.CompletedProcess:
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(REPO), "COLUMNS": "250",
           "HF_ENDPOINT": endpoint, "HF_HOME": str(tmp_path / hf_home), "TUNER_DATA": str(tmp_path / "data")}
    return subprocess.run([sys.executable, "-m", "tuner", "data", "sharegpt", *args], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)


def test_tune_data_sharegpt_verifies_against_the_local_hub(hub, tmp_path):
    r = _tune_data(tmp_path, hub)
    assert r.returncode == 0, r.stdout + r.stderr
    target = tmp_path / "data" / SHAREGPT.file_name
    assert f"sharegpt: {target}" in r.stdout and target.read_bytes() == SHAREGPT_BODY
    _Hub.files[_resolve(SHAREGPT)] = (SHAREGPT_BODY.replace(b"hi", b"ho"), _Hub.files[_resolve(SHAREGPT)][1])
    r = _tune_data(tmp_path, hub, "--dir", str(tmp_path / "other"), hf_home="empty-cache")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"error: sha256 of {SHAREGPT.file_name} is " in r.stderr
    assert not (tmp_path / "other" / SHAREGPT.file_name).exists()


def test_tune_data_on_an_unreachable_host_exits_2_with_the_fix(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    r = _tune_data(tmp_path, f"http://127.0.0.1:{port}", "--dir", str(tmp_path / "here"))
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"cannot download {SHAREGPT.file_name} from 127.0.0.1:{port}" in r.stderr
    assert "tune data sharegpt --dir ." in r.stderr and not (tmp_path / "here").exists()


def test_the_known_table_finds_a_spaces_dataset_by_file_name():
    assert SHAREGPT.url() == ("https://huggingface.co/datasets/anon8231489123/ShareGPT_Vicuna_unfiltered/"
                              "resolve/main/ShareGPT_V3_unfiltered_cleaned_split.json")
    assert downloads.known_for_path("${TUNER_DATA}/ShareGPT_V3_unfiltered_cleaned_split.json") is SHAREGPT
    assert downloads.known_for_path("/data/other.json") is None
    with pytest.raises(downloads.InputError, match="known: sharegpt"):
        downloads.known("nope")
