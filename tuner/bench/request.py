"""One streamed request, timed the way ``vllm bench serve`` (vLLM 0.33) times it.

Timing rules that make our numbers comparable with vLLM's:
- the clock starts right before the POST (after any concurrency slot was acquired), so connection
  set-up counts toward TTFT;
- a completions chunk counts as a token chunk when its ``choices`` list is non-empty (even with empty
  text); a chat chunk counts only when it streams output (``_choice_has_streamed_output``): the
  role-only opening chunk and an empty finish chunk do not;
- the request ends at the last token chunk: the usage chunk and ``[DONE]`` are not part of latency.

Unlike vLLM, every failure is reported as one short line (status and body excerpt, or exception
type and message) so that a study can show why a trial failed without a traceback per request.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import httpx

from tuner.bench.config import BenchConfig
from tuner.bench.datasets import SampleRequest
from tuner.bench.sse import DONE, SSEParser

NO_TOKEN_ERROR = ("Never received a valid chunk to calculate TTFT."
                  "This response will be marked as failed!")
_BODY_EXCERPT = 300


@dataclass(slots=True)
class RequestOutput:
    """Per-request measurements; times in seconds from ``time.perf_counter``."""

    success: bool = False
    generated_text: str = ""
    output_tokens: int | None = None  # usage.completion_tokens, when the server reported it
    prompt_len: int = 0               # usage.prompt_tokens when reported, else the dataset's count
    ttft: float = 0.0
    itl: list[float] = field(default_factory=list)
    latency: float = 0.0
    start_time: float = 0.0
    client_queue_time: float = 0.0
    error: str = ""


class _BadStream(Exception):
    pass


def build_payload(config: BenchConfig, prompt: str, output_len: int) -> dict[str, Any]:
    """The JSON body vLLM's openai / openai-chat request functions send, minus ``omit_fields``."""
    payload: dict[str, Any]
    if config.is_chat:
        payload = {
            "model": config.model,
            "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
            "max_completion_tokens": output_len,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    else:
        payload = {
            "model": config.model,
            "prompt": prompt,
            "repetition_penalty": 1.0,
            "max_tokens": output_len,
            "logprobs": None,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    if config.ignore_eos:
        payload["ignore_eos"] = True
    payload["temperature"] = config.temperature  # explicit: greedy unless told otherwise, as vLLM 0.11
    for name in config.omit_fields:
        payload.pop(name, None)
    return payload


def build_headers(request_id: str | None, api_key: str | None = None) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    api_key = api_key or os.environ.get("OPENAI_API_KEY")
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    if request_id:
        headers["x-request-id"] = request_id
    return headers


def make_client(config: BenchConfig) -> httpx.AsyncClient:
    """One client per run, a keep-alive connection per in-flight request (like vLLM's aiohttp)."""
    loopback = _is_loopback(config.base_url)
    return httpx.AsyncClient(
        transport=_ConnectionPerStream(verify=httpx.create_ssl_context(trust_env=not loopback)),
        timeout=httpx.Timeout(config.request_timeout_s),
        # Proxy variables must not capture the loopback servers that trials launch.
        trust_env=not loopback,
    )


class _ConnectionPerStream(httpx.AsyncBaseTransport):
    """Hands each request a single-connection transport of its own, reused once the stream closes.

    httpcore's shared pool rescans every connection for every request it places (O(n^2)); with
    hundreds of concurrent streams that bookkeeping ate the client's core: 512 streams at 50
    tokens/s each came through at ~2k chunks/s instead of ~25k. One-connection pools cost O(1).
    """

    def __init__(self, **transport_kwargs: Any) -> None:
        self._kwargs = transport_kwargs
        self._idle: list[httpx.AsyncHTTPTransport] = []
        self._all: list[httpx.AsyncHTTPTransport] = []

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if self._idle:
            transport = self._idle.pop()
        else:
            transport = httpx.AsyncHTTPTransport(
                limits=httpx.Limits(max_connections=1, max_keepalive_connections=1,
                                    keepalive_expiry=60),
                **self._kwargs)
            self._all.append(transport)
        try:
            response = await transport.handle_async_request(request)
        except BaseException:
            self._idle.append(transport)  # its pool has already dropped the failed connection
            raise
        response.stream = _ReleaseOnClose(response.stream, lambda: self._idle.append(transport))
        return response

    async def aclose(self) -> None:
        for transport in self._all:
            await transport.aclose()
        self._all.clear()
        self._idle.clear()


class _ReleaseOnClose(httpx.AsyncByteStream):
    __slots__ = ("_inner", "_release")

    def __init__(self, inner: Any, release: Any) -> None:
        self._inner, self._release = inner, release

    async def __aiter__(self):  # type: ignore[override]
        async for chunk in self._inner:
            yield chunk

    async def aclose(self) -> None:
        release, self._release = self._release, None
        try:
            await self._inner.aclose()
        finally:
            if release is not None:
                release()


async def probe(client: httpx.AsyncClient, base_url: str, timeout_s: float = 10.0) -> str | None:
    """None when something answers HTTP at ``base_url`` (any status), else why it cannot be reached."""
    try:
        await client.get(base_url.rstrip("/") + "/v1/models", timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    return None


async def send_request(
    client: httpx.AsyncClient,
    config: BenchConfig,
    request: SampleRequest,
    request_id: str | None = None,
) -> RequestOutput:
    """Stream one request; never raises for server or stream faults (they land in ``error``)."""
    body = json.dumps(build_payload(config, request.prompt, request.expected_output_len)).encode()
    headers = build_headers(request_id, config.api_key)
    out = RequestOutput(prompt_len=request.prompt_len)
    chat = config.is_chat
    parts: list[str] = []
    itl = out.itl
    perf = time.perf_counter
    loads = json.loads
    first = False
    st = perf()
    out.start_time = st
    last = st
    try:
        async with asyncio.timeout(config.request_timeout_s):
            async with client.stream("POST", config.api_url, content=body, headers=headers) as resp:
                if resp.status_code != 200:
                    out.error = await _http_error(resp)
                    return out
                parser = SSEParser()
                # Raw bytes skip httpx's decoder layers (measurably cheaper per chunk); an
                # encoded (or already buffered) body still goes through them.
                if resp.is_stream_consumed or "content-encoding" in resp.headers:
                    reads = resp.aiter_bytes()
                else:
                    reads = resp.aiter_raw()
                done_reading = False
                while not done_reading:
                    try:
                        raw = await anext(reads)
                        payloads = parser.feed(raw)
                    except StopAsyncIteration:
                        done_reading = True
                        payloads = parser.finish()
                    except UnicodeDecodeError as exc:
                        raise _BadStream(f"invalid UTF-8 in body: {exc.reason}") from None
                    for payload in payloads:
                        if payload == DONE:
                            continue
                        try:
                            data = loads(payload)
                            choices = data.get("choices")
                            if choices:
                                if chat:
                                    delta = choices[0].get("delta") or {}
                                    if not _streams_output(delta):
                                        continue
                                    text = delta.get("content")
                                else:
                                    text = choices[0].get("text")
                                t = perf()
                                if first:
                                    itl.append(t - last)
                                else:
                                    first = True
                                    out.ttft = t - st
                                last = t
                                if text:
                                    parts.append(text)
                            elif usage := data.get("usage"):
                                tokens = usage.get("completion_tokens")
                                if isinstance(tokens, int):
                                    out.output_tokens = tokens
                                prompt_tokens = usage.get("prompt_tokens")
                                if isinstance(prompt_tokens, int):
                                    out.prompt_len = prompt_tokens
                        except Exception as exc:  # JSON or shape errors: this stream is garbage
                            raise _BadStream(
                                f"{type(exc).__name__} on chunk {_excerpt(payload)}") from None
        out.generated_text = "".join(parts)
        out.latency = last - st
        out.success = first
        if not first:
            out.error = NO_TOKEN_ERROR
    except _BadStream as exc:
        out.error = f"malformed stream: {exc}"
    except TimeoutError:
        out.error = f"timed out after {config.request_timeout_s:g} s"
    except httpx.HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    except Exception as exc:  # anything else a broken server can provoke; never crash the run
        out.error = f"{type(exc).__name__}: {exc}"
    if not out.success:
        out.itl.clear()
    return out


def _streams_output(delta: Any) -> bool:
    """vLLM 0.33 ``_choice_has_streamed_output``: role-only and empty finish chunks carry no token."""
    if not isinstance(delta, dict):
        return False
    if delta.get("content") or delta.get("reasoning") or delta.get("tool_calls") \
            or delta.get("function_call"):
        return True
    return delta.get("content") == "" and "role" not in delta


async def _http_error(resp: httpx.Response) -> str:
    reason = resp.reason_phrase or ""
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in resp.aiter_bytes():
            chunks.append(chunk)
            size += len(chunk)
            if size >= _BODY_EXCERPT:
                break
    except httpx.HTTPError:
        pass
    text = b"".join(chunks)[:_BODY_EXCERPT].decode("utf-8", "replace")
    text = " ".join(text.split())
    head = f"HTTP {resp.status_code} {reason}".rstrip()
    return f"{head}: {text}" if text else head


def _excerpt(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
