"""`tuner.downloads` against a real HTTP server on 127.0.0.1 that honours Range requests: a good file,
a download cut off and resumed, a server that ignores Range, a bad checksum, an unreachable host."""

from __future__ import annotations

import hashlib
import os
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import ClassVar

import pytest

from tuner import downloads
from tuner.downloads import DownloadError, KnownDataset

PAYLOAD = os.urandom(700_000)
SHA = hashlib.sha256(PAYLOAD).hexdigest()


class _Handler(BaseHTTPRequestHandler):
    ranges: ClassVar[list[str | None]] = []
    cut_at: int | None = None     # send the full length but stop after this many bytes
    ignore_range = False

    def do_GET(self) -> None:
        rng = self.headers.get("Range")
        type(self).ranges.append(rng)
        start = 0
        m = re.fullmatch(r"bytes=(\d+)-", rng or "")
        if m and not self.ignore_range:
            start = int(m.group(1))
            if start >= len(PAYLOAD):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(PAYLOAD)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
        else:
            self.send_response(200)
        body = PAYLOAD[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.cut_at is not None:
            self.wfile.write(body[: self.cut_at])
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    _Handler.ranges, _Handler.cut_at, _Handler.ignore_range = [], None, False
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _dataset(url: str, sha: str | None = SHA, size: int | None = len(PAYLOAD)) -> KnownDataset:
    return KnownDataset(name="sample", url=f"{url}/data/sample.json", file_name="sample.json",
                        size=size, sha256=sha)


def test_good_file_arrives_whole_with_progress(server, tmp_path):
    seen = []
    path = downloads.download(_dataset(server), tmp_path, progress=lambda d, t: seen.append((d, t)))
    assert path == tmp_path / "sample.json" and path.read_bytes() == PAYLOAD
    assert not (tmp_path / "sample.json.part").exists()
    assert seen[-1] == (len(PAYLOAD), len(PAYLOAD)) and len(seen) > 1
    assert _Handler.ranges == [None]
    assert downloads.download(_dataset(server), tmp_path) == path  # there already: no request
    assert _Handler.ranges == [None]


def test_a_cut_download_keeps_its_part_and_resumes_with_a_range(server, tmp_path):
    _Handler.cut_at = 250_000
    with pytest.raises(DownloadError, match="run again to resume") as err:
        downloads.download(_dataset(server), tmp_path)
    part = tmp_path / "sample.json.part"
    assert part.stat().st_size == 250_000 and not (tmp_path / "sample.json").exists()
    assert "curl -fL -C - -o sample.json" in str(err.value)
    _Handler.cut_at = None
    path = downloads.download(_dataset(server), tmp_path)
    assert _Handler.ranges == [None, "bytes=250000-"]
    assert path.read_bytes() == PAYLOAD and not part.exists()


def test_a_server_that_ignores_range_starts_over(server, tmp_path):
    _Handler.ignore_range = True
    (tmp_path / "sample.json.part").write_bytes(b"stale bytes")
    path = downloads.download(_dataset(server), tmp_path)
    assert _Handler.ranges == ["bytes=11-"] and path.read_bytes() == PAYLOAD


def test_a_complete_part_is_finished_without_new_bytes(server, tmp_path):
    (tmp_path / "sample.json.part").write_bytes(PAYLOAD)
    path = downloads.download(_dataset(server), tmp_path)  # the server answers 416
    assert _Handler.ranges == [f"bytes={len(PAYLOAD)}-"] and path.read_bytes() == PAYLOAD


def test_bad_checksum_removes_the_part_and_names_both_hashes(server, tmp_path):
    with pytest.raises(DownloadError, match=f"sha256 of sample.json is {SHA}, expected 0+ ") as err:
        downloads.download(_dataset(server, sha="0" * 64), tmp_path)
    assert "removed sample.json.part" in str(err.value)
    assert list(tmp_path.iterdir()) == []


def test_unreachable_host_prints_the_command_to_run_elsewhere(tmp_path):
    with socket.socket() as s:  # a port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dataset = _dataset(f"http://127.0.0.1:{port}")
    with pytest.raises(DownloadError) as err:
        downloads.download(dataset, tmp_path, timeout_s=5)
    text = str(err.value)
    assert f"cannot download from 127.0.0.1:{port}" in text
    assert f"curl -fL -C - -o sample.json {dataset.url}" in text
    assert f"echo '{SHA}  sample.json' | sha256sum -c -" in text
    assert f"then copy it to {tmp_path / 'sample.json'}" in text


def test_no_pinned_checksum_needs_no_verify(server, tmp_path):
    with pytest.raises(DownloadError, match="--no-verify"):
        downloads.download(_dataset(server, sha=None), tmp_path)
    assert _Handler.ranges == []
    path = downloads.download(_dataset(server, sha=None, size=None), tmp_path, verify=False)
    assert path.read_bytes() == PAYLOAD


def test_the_known_table_finds_a_spaces_dataset_by_file_name():
    sharegpt = downloads.known("sharegpt")
    assert sharegpt.url.endswith("/resolve/main/ShareGPT_V3_unfiltered_cleaned_split.json")
    assert downloads.known_for_path("${TUNER_DATA}/ShareGPT_V3_unfiltered_cleaned_split.json") is sharegpt
    assert downloads.known_for_path("/data/other.json") is None
    with pytest.raises(downloads.InputError, match="known: sharegpt"):
        downloads.known("nope")
