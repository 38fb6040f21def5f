"""Transport: a minimal HTTP/1.1 client for streamed responses, on asyncio protocols.

Why not httpx or aiohttp: a streaming benchmark client spends its CPU per received chunk, and both
libraries pass every network read through several layers and then wake a coroutine to hand it
over. Here the bytes go from ``data_received`` straight into the caller's handler, synchronously,
and a coroutine wakes once per response. Measured in docs/benchmark-client.md (client capacity).

Scope is what a benchmark needs: one request at a time per keep-alive connection, ``Content-Length``,
chunked and read-until-close bodies, gzip/deflate bodies, TLS. No proxies, redirects or cookies.
The request/response meaning (SSE, JSON, timing) lives in ``tuner.bench.request``.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import zlib
from typing import Protocol
from urllib.parse import urlsplit

_MAX_HEAD = 64 * 1024


class HTTPError(Exception):
    """A transport-level failure; the message names what went wrong with the connection."""


class ConnectError(HTTPError):
    pass


class RemoteProtocolError(HTTPError):
    pass


class ResponseHandler(Protocol):
    """Receives one response as it arrives. Exceptions raised here fail the request with them."""

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None: ...

    def on_body(self, data: bytes) -> None: ...


class HTTPClient:
    """Keep-alive connections to one origin, one in-flight request per connection.

    A connection per concurrent request is what vLLM's aiohttp client ends up with too; reusing
    idle ones keeps connection set-up out of most requests' TTFT, as there.
    """

    def __init__(self, base_url: str, *, connect_timeout_s: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"base URL {base_url!r}: expected http://host[:port] or https://...")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = ssl.create_default_context() if parts.scheme == "https" else None
        default_port = 443 if parts.scheme == "https" else 80
        self._host_header = self.host if self.port == default_port else f"{self.host}:{self.port}"
        if ":" in self.host:  # IPv6 literal
            self._host_header = f"[{self.host}]" + ("" if self.port == default_port
                                                    else f":{self.port}")
        self._connect_timeout_s = connect_timeout_s
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def request(self, method: str, target: str, body: bytes, headers: dict[str, str],
                      handler: ResponseHandler) -> None:
        """Send one request and feed its response to ``handler``; returns when the body ended.

        A kept-alive connection that the server closed while idle is retried on another, as long
        as nothing of the response had arrived (the server did not take the request); a new
        connection closed that way is an error, so a request is never sent to a server twice
        because of it.
        """
        head = self._head(method, target, body, headers)
        while True:
            conn = await self._connection()
            reused = conn.exchanges > 0
            try:
                await conn.exchange(head, body, handler)
            except _StaleConnection:
                self._drop(conn)
                if reused:
                    continue  # the next idle connection, or a new one
                raise RemoteProtocolError("server closed the connection without a response") \
                    from None
            except BaseException:
                self._drop(conn)  # its state is unknown after a failure or a cancel
                raise
            if conn.reusable:
                self._idle.append(conn)
            else:
                self._drop(conn)
            return

    async def aclose(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()

    async def __aenter__(self) -> HTTPClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _head(self, method: str, target: str, body: bytes, headers: dict[str, str]) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}",
                 f"Content-Length: {len(body)}", "Accept-Encoding: gzip, deflate"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    async def _connection(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if conn.open:
                return conn
            self._all.discard(conn)
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout_s):
                _, conn = await loop.create_connection(
                    _Connection, self.host, self.port, ssl=self._ssl,
                    server_hostname=self.host if self._ssl else None)
        except TimeoutError:
            raise ConnectError(f"connecting to {self.host}:{self.port} timed out after "
                               f"{self._connect_timeout_s:g} s") from None
        except OSError as exc:
            reason = os.strerror(exc.errno) if exc.errno else str(exc)
            raise ConnectError(f"cannot connect to {self.host}:{self.port}: {reason}") from None
        self._all.add(conn)
        return conn

    def _drop(self, conn: _Connection) -> None:
        conn.close()
        self._all.discard(conn)


class _StaleConnection(Exception):
    pass


_HEAD, _LENGTH, _CHUNK_SIZE, _CHUNK_DATA, _CHUNK_END, _TRAILER, _UNTIL_CLOSE, _DONE = range(8)


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; parses the response incrementally as reads arrive."""

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self.open = False
        self.reusable = False
        self._handler: ResponseHandler | None = None
        self._done: asyncio.Future[None] | None = None
        self._state = _DONE
        self._buf = bytearray()
        self._remaining = 0
        self._received = False
        self.exchanges = 0
        self._decompress: zlib._Decompress | None = None  # type: ignore[name-defined]

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.open = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        if self._done is None or self._done.done():
            return
        if self._state == _UNTIL_CLOSE:
            self._finish()
        elif not self._received:
            self._done.set_exception(_StaleConnection())
        else:
            reason = f": {exc}" if exc else ""
            self._done.set_exception(RemoteProtocolError(
                f"server closed the connection mid-response{reason}"))

    def data_received(self, data: bytes) -> None:
        if self._done is None or self._done.done():
            return  # bytes after a finished response on a connection we will not reuse
        self._received = True
        try:
            self._feed(data)
        except Exception as exc:
            self.reusable = False
            self.close()
            if not self._done.done():
                self._done.set_exception(exc)

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost settles the response

    # used by HTTPClient
    async def exchange(self, head: bytes, body: bytes, handler: ResponseHandler) -> None:
        assert self._transport is not None
        self._handler = handler
        self._done = asyncio.get_running_loop().create_future()
        self._state, self._received, self.reusable = _HEAD, False, False
        self.exchanges += 1
        self._buf.clear()
        self._decompress = None
        self._transport.writelines((head, body))
        try:
            await self._done
        finally:
            self._handler = None

    def close(self) -> None:
        self.open = False
        if self._transport is not None:
            self._transport.abort()

    # parsing
    def _feed(self, data: bytes) -> None:
        """Parse one read. The body bytes a read carries reach the handler in one call, so a
        read holding many small chunks costs one pass through the SSE parser, not one per chunk."""
        if self._buf:
            data = bytes(self._buf) + data
            self._buf.clear()
        pos, size = 0, len(data)
        body: list[bytes] = []
        find = data.find
        while pos < size:
            state = self._state
            if state == _CHUNK_SIZE:
                end = find(b"\r\n", pos)
                if end < 0:
                    if size - pos > 1024:
                        raise RemoteProtocolError("malformed chunk size line")
                    break
                n = _chunk_size(data[pos:end])
                pos = end + 2
                if n:
                    self._remaining, self._state = n, _CHUNK_DATA
                    if pos + n + 2 <= size:  # the whole chunk is here: the common case
                        if data[pos + n:pos + n + 2] != b"\r\n":
                            raise RemoteProtocolError("chunk data not followed by CRLF")
                        body.append(data[pos:pos + n])
                        pos += n + 2
                        self._state = _CHUNK_SIZE
                else:
                    self._state = _TRAILER
            elif state == _CHUNK_DATA or state == _LENGTH:
                take = min(self._remaining, size - pos)
                body.append(data[pos:pos + take])
                pos += take
                self._remaining -= take
                if not self._remaining:
                    if state == _CHUNK_DATA:
                        self._state = _CHUNK_END
                    else:
                        self._deliver(body)
                        self._finish()
            elif state == _CHUNK_END:
                if size - pos < 2:
                    break
                if data[pos:pos + 2] != b"\r\n":
                    raise RemoteProtocolError("chunk data not followed by CRLF")
                pos += 2
                self._state = _CHUNK_SIZE
            elif state == _TRAILER:
                end = data.find(b"\r\n", pos)
                if end < 0:
                    break
                line_empty = end == pos
                pos = end + 2
                if line_empty:
                    self._deliver(body)
                    self._finish()
            elif state == _UNTIL_CLOSE:
                body.append(data[pos:])
                pos = size
            elif state == _HEAD:
                end = data.find(b"\r\n\r\n", pos)
                if end < 0:
                    if size - pos > _MAX_HEAD:
                        raise RemoteProtocolError("response head larger than 64 KiB")
                    break
                self._start(data[pos:end])
                pos = end + 4
            else:  # _DONE: anything more is not ours to read
                self.reusable = False
                pos = size
        self._deliver(body)
        if pos < size:
            self._buf += data[pos:]

    def _deliver(self, body: list[bytes]) -> None:
        if not body:
            return
        piece = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        if self._decompress is not None:
            piece = self._decompress.decompress(piece)
            if not piece:
                return
        assert self._handler is not None
        self._handler.on_body(piece)

    def _start(self, head: bytes) -> None:
        lines = head.decode("latin-1").split("\r\n")
        status_line = lines[0].split(" ", 2)
        if len(status_line) < 2 or not status_line[0].startswith("HTTP/1."):
            raise RemoteProtocolError(f"not an HTTP/1.x response: {lines[0][:80]!r}")
        try:
            status = int(status_line[1])
        except ValueError:
            raise RemoteProtocolError(f"bad status line: {lines[0][:80]!r}") from None
        reason = status_line[2] if len(status_line) > 2 else ""
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                key = name.strip().lower()
                headers[key] = (headers[key] + ", " + value.strip()) if key in headers \
                    else value.strip()
        if 100 <= status < 200:
            return  # interim response; the real head follows
        keep_alive = status_line[0] == "HTTP/1.1" and "close" not in headers.get(
            "connection", "").lower()
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            self._decompress = zlib.decompressobj(47 if encoding == "gzip" else 15)
        elif encoding != "identity":
            raise RemoteProtocolError(f"unsupported Content-Encoding {encoding!r}")
        assert self._handler is not None
        self._handler.on_head(status, reason, headers)
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._state = _CHUNK_SIZE
        elif "content-length" in headers:
            try:
                self._remaining = int(headers["content-length"])
            except ValueError:
                raise RemoteProtocolError("bad Content-Length") from None
            self._state = _LENGTH
            if self._remaining == 0:
                self._finish()
        else:
            self._state = _UNTIL_CLOSE
            keep_alive = False
        self.reusable = keep_alive

    def _finish(self) -> None:
        self._state = _DONE
        if self._decompress is not None:
            rest = self._decompress.flush()
            self._decompress = None
            if rest and self._handler is not None:
                self._handler.on_body(rest)
        if self._done is not None and not self._done.done():
            self._done.set_result(None)


def _chunk_size(line: bytes) -> int:
    try:
        return int(line, 16)
    except ValueError:
        pass
    try:
        return int(line.split(b";", 1)[0].strip(), 16)  # with a chunk extension
    except ValueError:
        raise RemoteProtocolError(f"bad chunk size {bytes(line[:20])!r}") from None
