"""The benchmark's HTTP/1.1 transport against raw servers: body framings, keep-alive, failures.

Each server here writes exact bytes, so every framing rule is exercised the way a real server's
bytes reach it: in whatever pieces the network delivers.
"""

import asyncio
import gzip
import shutil
import ssl
import subprocess
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.bench.http import ConnectError, HTTPClient, RemoteProtocolError


class Collect:
    def __init__(self):
        self.status, self.reason, self.headers, self.body = None, None, None, bytearray()
        self.reads = 0

    def on_head(self, status, reason, headers):
        self.status, self.reason, self.headers = status, reason, headers

    def on_body(self, data):
        self.reads += 1
        self.body += data


async def _read_request(reader):
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.decode("latin-1").split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "content-length":
            length = int(value)
    body = await reader.readexactly(length)
    return head, body


def run(responses, requests=1, *, connections=None):
    """Serve ``responses`` (a list of byte pieces / float pauses / "close", one list per
    request, in order over all connections) and make ``requests`` requests one after another."""
    async def go():
        queue = list(responses)
        conns = []

        async def handle(reader, writer):
            conns.append(writer)
            try:
                while queue:
                    await _read_request(reader)
                    for piece in queue.pop(0):
                        if piece == "close":
                            writer.transport.abort()
                            return
                        if isinstance(piece, float):
                            await asyncio.sleep(piece)
                        else:
                            writer.write(piece)
                            await writer.drain()
            except (asyncio.IncompleteReadError, ConnectionError):
                pass

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        results = []
        try:
            async with HTTPClient(f"http://127.0.0.1:{port}") as client:
                for _ in range(requests):
                    c = Collect()
                    try:
                        await client.request("POST", "/x", b"{}", {}, c)
                        results.append(c)
                    except Exception as exc:  # noqa: BLE001 - the test inspects it
                        results.append(exc)
        finally:
            server.close()
        if connections is not None:
            connections.append(len(conns))
        return results
    return asyncio.run(go())


def chunked(*parts: bytes, trailer: bytes = b"") -> bytes:
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n" + trailer + b"\r\n"


HEAD_CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


def test_content_length_body_and_headers():
    (c,) = run([[b"HTTP/1.1 201 Created\r\nContent-Length: 5\r\nX-A: 1\r\nX-a: 2\r\n\r\nhello"]])
    assert (c.status, c.reason, bytes(c.body)) == (201, "Created", b"hello")
    assert c.headers["x-a"] == "1, 2"


def test_chunked_with_extensions_and_trailers():
    body = b"5;ext=1\r\nhello\r\n1\r\n!\r\n0\r\nX-Trailer: yes\r\n\r\n"
    (c,) = run([[HEAD_CHUNKED + body]])
    assert bytes(c.body) == b"hello!"


def test_all_chunks_of_one_read_reach_the_handler_in_one_call():
    (c,) = run([[HEAD_CHUNKED + chunked(*[b"data: x\n\n"] * 50)]])
    assert bytes(c.body) == b"data: x\n\n" * 50 and c.reads == 1


def test_gzip_and_deflate_bodies_are_decoded():
    data = b"data: hello\n\n" * 20
    for encoding, packed in (("gzip", gzip.compress(data)), ("deflate", zlib.compress(data))):
        head = f"HTTP/1.1 200 OK\r\nContent-Encoding: {encoding}\r\n".encode()
        (c,) = run([[head + b"Transfer-Encoding: chunked\r\n\r\n"
                     + chunked(packed[:7], packed[7:])]])
        assert bytes(c.body) == data, encoding


def test_unknown_encoding_is_refused_by_name():
    (e,) = run([[b"HTTP/1.1 200 OK\r\nContent-Encoding: br\r\nContent-Length: 1\r\n\r\nx"]])
    assert isinstance(e, RemoteProtocolError) and "'br'" in str(e)


def test_interim_response_is_skipped():
    (c,) = run([[b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]])
    assert c.status == 200 and bytes(c.body) == b"ok"


def test_body_until_close_without_length():
    (c,) = run([[b"HTTP/1.0 200 OK\r\n\r\npart one, ", 0.01, b"part two", "close"]])
    assert bytes(c.body) == b"part one, part two"


def test_keep_alive_reuses_one_connection():
    n = []
    one = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    results = run([one, one, one], requests=3, connections=n)
    assert all(bytes(c.body) == b"ok" for c in results) and n == [1]


def test_connection_close_header_means_a_new_connection():
    n = []
    one = [b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok", "close"]
    results = run([one, one], requests=2, connections=n)
    assert all(bytes(c.body) == b"ok" for c in results) and n == [2]


def test_idle_connection_closed_by_the_server_is_retried_once():
    n = []
    first = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"]
    results = run([first, ["close"], first], requests=2, connections=n)
    assert [bytes(c.body) for c in results] == [b"ok", b"ok"] and n == [2]


def test_bytes_after_the_response_end_it_and_retire_the_connection():
    n = []
    one = [b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n"]
    results = run([one, one], requests=2, connections=n)
    assert [bytes(c.body) for c in results] == [b"ok", b"ok"] and n == [2]


def test_trailers_do_not_change_the_head_the_handler_got():
    (c,) = run([[HEAD_CHUNKED + chunked(b"ok", trailer=b"X-Trailer: yes\r\n")]])
    assert bytes(c.body) == b"ok" and "x-trailer" not in c.headers


def test_an_exception_from_the_handler_fails_the_request_with_it():
    class Refuse(Collect):
        def on_body(self, data):
            raise ValueError("handler says no")

    async def go():
        async def handle(reader, writer):
            await _read_request(reader)
            writer.write(HEAD_CHUNKED + chunked(b"a", b"b"))
            await writer.drain()
        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            async with HTTPClient(f"http://127.0.0.1:{port}") as client:
                await client.request("POST", "/x", b"{}", {}, Refuse())
        finally:
            server.close()
    with pytest.raises(ValueError, match="handler says no"):
        asyncio.run(go())


def test_server_closing_before_answering_twice_is_an_error():
    results = run([["close"], ["close"]], requests=1)
    assert isinstance(results[0], RemoteProtocolError)
    assert "without a response" in str(results[0])


@pytest.mark.parametrize("response, words", [
    (b"SSH-2.0-OpenSSH\r\n\r\n", "not an HTTP/1.x response"),
    (b"HTTP/1.1 abc OK\r\n\r\n", "Invalid status code): b'HTTP/1.1 abc OK'"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n", "Content-Length"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n", "Duplicate"),
    (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n", "switched protocols"),
    (HEAD_CHUNKED + b"zz\r\nhello\r\n", "malformed response body: Invalid character in chunk"),
    (HEAD_CHUNKED + b"2\r\nhello\r\n", "after chunk data"),
    (HEAD_CHUNKED + b"5\r\nhel", "mid-response"),
    (b"HTTP/1.1 200 OK\r\n" + b"X-Big: " + b"x" * 70000, "larger than 64 KiB"),
])
def test_broken_framing_names_what_is_wrong(response, words):
    (e,) = run([[response, "close"]])
    assert isinstance(e, RemoteProtocolError) and words in str(e), e


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI for a certificate")
def test_https_verifies_the_server_and_streams_the_body(tmp_path, monkeypatch):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts this certificate only
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)

    async def go():
        async def handle(reader, writer):
            await _read_request(reader)
            writer.write(HEAD_CHUNKED + chunked(b"data: a\n\n", b"data: b\n\n"))
            await writer.drain()
        server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        c = Collect()
        try:
            async with HTTPClient(f"https://127.0.0.1:{port}") as client:
                await client.request("POST", "/x", b"{}", {}, c)
        finally:
            server.close()
        return c
    c = asyncio.run(go())
    assert c.status == 200 and bytes(c.body) == b"data: a\n\ndata: b\n\n"


def test_nothing_listening_is_a_connect_error():
    async def go():
        async with HTTPClient("http://127.0.0.1:9") as client:
            await client.request("GET", "/", b"", {}, Collect())
    with pytest.raises(ConnectError, match="cannot connect to 127.0.0.1:9"):
        asyncio.run(go())


@pytest.mark.parametrize("url", ["ftp://h", "http://", "localhost:8000"])
def test_bad_base_url_is_refused(url):
    with pytest.raises(ValueError, match="base URL"):
        HTTPClient(url)


PAYLOADS = [b"data: " + bytes([65 + i]) * (i * 7 + 1) + b"\n\n" for i in range(12)]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cuts=st.lists(st.integers(min_value=1, max_value=400), max_size=8),
       framing=st.sampled_from(["chunked", "length"]))
def test_any_split_of_the_bytes_gives_the_same_body(cuts, framing):
    data = b"".join(PAYLOADS)
    if framing == "chunked":
        raw = HEAD_CHUNKED + chunked(*PAYLOADS)
    else:
        raw = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data
    points = sorted({c for c in cuts if c < len(raw)})
    pieces = []
    for a, b in zip([0] + points, points + [len(raw)]):
        pieces += [raw[a:b], 0.002]
    (c,) = run([pieces])
    assert bytes(c.body) == data and (c.status, c.reason) == (200, "OK")
    assert c.headers.get("transfer-encoding" if framing == "chunked" else "content-length")
