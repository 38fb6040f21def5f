"""Transport: a minimal HTTP/1.1 client for streamed responses, on asyncio protocols.

Why not httpx or aiohttp: a streaming benchmark client spends its CPU per received chunk, and both
libraries pass every network read through several layers and then wake a coroutine to hand it
over. Here the bytes go from ``data_received`` through llhttp (Node's HTTP parser, in C, through
``httptools`` as uvicorn uses it) straight into the caller's handler, synchronously, and a
coroutine wakes once per response. Measured in docs/benchmark-client.md (client capacity).

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

import httptools

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


class _Connection(asyncio.Protocol):
    """One HTTP/1.1 connection; llhttp parses each read as it arrives, in C.

    llhttp calls back once per chunk with its data. ``on_body`` is the body list's own ``append``
    (a C call, no Python frame per chunk), and the pieces of one read reach the handler joined, in
    one call once the read is parsed: a read holding many small chunks costs one pass through the
    SSE parser, not one per chunk. One parser serves the connection's successive responses.
    """

    def __init__(self) -> None:
        self._transport: asyncio.Transport | None = None
        self.open = False
        self.reusable = False
        self.exchanges = 0
        self._handler: ResponseHandler | None = None
        self._done: asyncio.Future[None] | None = None
        self._received = False
        self._first_bytes = b""
        self._head_bytes = 0
        self._body: list[bytes] = []
        self.on_body = self._body.append
        self._reason = ""
        self._headers: dict[str, str] = {}
        self._head_done = False
        self._interim = False
        self._until_close = False
        self._decompress: zlib._Decompress | None = None  # type: ignore[name-defined]
        self._parser = httptools.HttpResponseParser(self)  # looks its callbacks up once, here

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.open = True

    def connection_lost(self, exc: Exception | None) -> None:
        self.open = False
        done = self._done
        if done is None or done.done():
            return
        if self._head_done and self._until_close:  # the end of the body is the end of the stream
            try:
                self._finish()
            except Exception as error:  # raised by the handler given the last bytes
                done.set_exception(error)
        elif not self._received:
            done.set_exception(_StaleConnection())
        else:
            reason = f": {exc}" if exc else ""
            done.set_exception(RemoteProtocolError(
                f"server closed the connection mid-response{reason}"))

    def data_received(self, data: bytes) -> None:
        done = self._done
        if done is None or done.done():
            return  # bytes after a finished response on a connection we will not reuse
        if not self._received:
            self._received, self._first_bytes = True, data[:80]
        try:
            self._parser.feed_data(data)
            if self._body:
                self._deliver()
            if not self._head_done:
                self._head_bytes += len(data)
                if self._head_bytes > _MAX_HEAD:
                    raise RemoteProtocolError("response head larger than 64 KiB")
        except Exception as exc:
            self.reusable = False
            self.close()
            if not done.done():
                done.set_exception(self._failure(exc))

    def eof_received(self) -> bool:
        return False  # close our side too; connection_lost settles the response

    # llhttp callbacks, called from inside feed_data
    def on_message_begin(self) -> None:
        assert self._done is not None
        if self._done.done():  # stops the parser; data_received drops the connection
            raise RemoteProtocolError("bytes after the end of the response")
        self._reason, self._headers = "", {}
        self._head_done = self._interim = self._until_close = False

    def on_status(self, reason: bytes) -> None:
        self._reason += reason.decode("latin-1")  # in pieces when a read ends inside it

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._head_done:
            return  # a trailer: not part of the head the handler was given
        key, text = name.decode("latin-1").lower(), value.decode("latin-1").strip()
        headers = self._headers
        headers[key] = f"{headers[key]}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        self._head_done = True
        status = self._parser.get_status_code()
        if status == 101:
            raise RemoteProtocolError("server switched protocols (101), which was not asked for")
        if 100 <= status < 200:
            self._interim = True  # the real head follows
            return
        headers = self._headers
        encoding = headers.get("content-encoding", "identity").lower()
        if encoding in ("gzip", "deflate"):
            self._decompress = zlib.decompressobj(47 if encoding == "gzip" else 15)
        elif encoding != "identity":
            raise RemoteProtocolError(f"unsupported Content-Encoding {encoding!r}")
        self.reusable = self._parser.should_keep_alive()  # HTTP/1.1 without "close", framed body
        self._until_close = "content-length" not in headers \
            and "chunked" not in headers.get("transfer-encoding", "").lower()
        assert self._handler is not None
        self._handler.on_head(status, self._reason, headers)

    def on_message_complete(self) -> None:
        if self._interim:
            return
        if self._body:
            self._deliver()
        self._finish()

    # used by HTTPClient
    async def exchange(self, head: bytes, body: bytes, handler: ResponseHandler) -> None:
        assert self._transport is not None
        self._handler = handler
        self._done = asyncio.get_running_loop().create_future()
        self._received = self.reusable = False
        self._head_done, self._head_bytes = False, 0
        self.exchanges += 1
        self._body.clear()
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

    def _deliver(self) -> None:
        body = self._body
        piece = body[0] if len(body) == 1 else b"".join(body)
        body.clear()
        if self._decompress is not None:
            piece = self._decompress.decompress(piece)
            if not piece:
                return
        assert self._handler is not None
        self._handler.on_body(piece)

    def _finish(self) -> None:
        if self._decompress is not None:
            rest = self._decompress.flush()
            self._decompress = None
            if rest and self._handler is not None:
                self._handler.on_body(rest)
        if self._done is not None and not self._done.done():
            self._done.set_result(None)

    def _failure(self, exc: Exception) -> Exception:
        """What the request fails with: an exception raised in a callback (the handler's or ours)
        as it was raised, llhttp's own complaint with where it happened and what the server sent."""
        if isinstance(exc, httptools.HttpParserCallbackError) and exc.__context__ is not None:
            return exc.__context__  # type: ignore[return-value]
        if not isinstance(exc, httptools.HttpParserError):
            return exc
        if self._head_done:
            return RemoteProtocolError(f"malformed response body: {exc}")
        line = self._first_bytes.split(b"\r\n", 1)[0]
        if not line.startswith(b"HTTP/1."):
            return RemoteProtocolError(f"not an HTTP/1.x response: {line!r}")
        return RemoteProtocolError(f"malformed response head ({exc}): {line!r}")
