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
import json
import os
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from tuner.bench.config import BenchConfig
from tuner.bench.datasets import SampleRequest
from tuner.bench.http import HTTPClient, HTTPError
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


def make_client(config: BenchConfig) -> HTTPClient:
    """One client per run, a keep-alive connection per in-flight request (like vLLM's aiohttp)."""
    return HTTPClient(config.base_url)


async def probe(client: HTTPClient, base_url: str, timeout_s: float = 10.0) -> str | None:
    """None when something answers HTTP at ``base_url`` (any status), else why it cannot be reached."""
    target = urlsplit(base_url.rstrip("/") + "/v1/models").path
    try:
        async with asyncio.timeout(timeout_s):
            await client.request("GET", target, b"", {}, _Discard())
    except TimeoutError:
        return f"no HTTP answer from {base_url} within {timeout_s:g} s"
    except HTTPError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


class _Discard:
    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        pass

    def on_body(self, data: bytes) -> None:
        pass


class _Stream:
    """Turns one response, read by read, into token times; runs inside the transport's callback.

    Each token chunk is timed the moment its read is parsed, without a coroutine switch, so the
    client's own scheduling adds nothing to TTFT and ITL.
    """

    __slots__ = ("out", "chat", "parts", "parser", "first", "start", "last", "error_head",
                 "error_body")

    def __init__(self, out: RequestOutput, chat: bool, start: float) -> None:
        self.out, self.chat, self.start, self.last = out, chat, start, start
        self.parts: list[str] = []
        self.parser = SSEParser()
        self.first = False
        self.error_head = ""
        self.error_body = bytearray()

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        if status != 200:
            self.error_head = f"HTTP {status} {reason}".rstrip()

    def on_body(self, data: bytes) -> None:
        if self.error_head:
            if len(self.error_body) < _BODY_EXCERPT:
                self.error_body += data[:_BODY_EXCERPT - len(self.error_body)]
            return
        try:
            payloads = self.parser.feed(data)
        except UnicodeDecodeError as exc:
            raise _BadStream(f"invalid UTF-8 in body: {exc.reason}") from None
        if payloads:
            self.consume(payloads)

    def consume(self, payloads: list[str]) -> None:
        out, chat, perf, loads = self.out, self.chat, time.perf_counter, orjson.loads
        itl, parts, first, last = out.itl, self.parts, self.first, self.last
        try:
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
                            out.ttft = t - self.start
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
        finally:
            self.first, self.last = first, last

    def http_error(self) -> str:
        text = " ".join(bytes(self.error_body).decode("utf-8", "replace").split())
        return f"{self.error_head}: {text}" if text else self.error_head


async def send_request(
    client: HTTPClient,
    config: BenchConfig,
    request: SampleRequest,
    request_id: str | None = None,
) -> RequestOutput:
    """Stream one request; never raises for server or stream faults (they land in ``error``)."""
    body = json.dumps(build_payload(config, request.prompt, request.expected_output_len)).encode()
    headers = build_headers(request_id, config.api_key)
    target = _target(config.api_url)
    out = RequestOutput(prompt_len=request.prompt_len)
    st = time.perf_counter()
    out.start_time = st
    stream = _Stream(out, config.is_chat, st)
    try:
        async with asyncio.timeout(config.request_timeout_s):
            await client.request("POST", target, body, headers, stream)
        if stream.error_head:
            out.error = stream.http_error()
            return out
        stream.consume(stream.parser.finish())
        out.generated_text = "".join(stream.parts)
        out.latency = stream.last - st
        out.success = stream.first
        if not stream.first:
            out.error = NO_TOKEN_ERROR
    except _BadStream as exc:
        out.error = f"malformed stream: {exc}"
    except TimeoutError:
        out.error = f"timed out after {config.request_timeout_s:g} s"
    except HTTPError as exc:
        out.error = f"{type(exc).__name__}: {exc}"
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


def _excerpt(text: str, limit: int = 80) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _target(url: str) -> str:
    parts = urlsplit(url)
    return (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
