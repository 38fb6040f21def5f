"""Plain (non-streamed) JSON requests to an OpenAI-compatible server, a few at a time.

For measurements that need a response's content rather than its timing: the quality probe's greedy
answers and logprobs. Same transport as the benchmark (``tuner.bench.http``), so API keys, keep-alive
and error texts behave the same; a failed request comes back as its error, never as an exception.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tuner.bench.http import HTTPClient, HTTPError
from tuner.bench.request import build_headers

_BODY_EXCERPT = 300


@dataclass(frozen=True)
class Reply:
    """One request's end: the parsed JSON body, or why there is none."""

    body: dict[str, Any] | None = None
    error: str = ""


class _Collect:
    def __init__(self) -> None:
        self.status = 0
        self.head = ""
        self.data = bytearray()

    def on_head(self, status: int, reason: str, headers: dict[str, str]) -> None:
        self.status, self.head = status, f"HTTP {status} {reason}".rstrip()

    def on_body(self, data: bytes) -> None:
        self.data += data


async def _post(client: HTTPClient, target: str, payload: dict, headers: dict[str, str]) -> Reply:
    sink = _Collect()
    try:
        await client.request("POST", target, json.dumps(payload).encode(), headers, sink)
    except HTTPError as exc:
        return Reply(error=f"{type(exc).__name__}: {exc}")
    text = bytes(sink.data).decode("utf-8", "replace")
    if sink.status != 200:
        return Reply(error=f"{sink.head}: {' '.join(text.split())[:_BODY_EXCERPT]}".rstrip(": "))
    try:
        body = json.loads(text)
    except ValueError:
        return Reply(error=f"not JSON: {text[:_BODY_EXCERPT]!r}")
    if not isinstance(body, dict):
        return Reply(error=f"not a JSON object: {text[:_BODY_EXCERPT]!r}")
    return Reply(body=body)


async def _post_all(base_url: str, path: str, payloads: list[dict], concurrency: int,
                    api_key: str | None, timeout_s: float) -> list[Reply]:
    headers = build_headers(None, api_key)
    target = urlsplit(base_url.rstrip("/") + "/" + path.lstrip("/")).path
    gate = asyncio.Semaphore(concurrency)
    async with HTTPClient(base_url) as client:
        async def one(payload: dict) -> Reply:
            async with gate:
                return await _post(client, target, payload, headers)

        tasks = [asyncio.ensure_future(one(p)) for p in payloads]
        done, pending = await asyncio.wait(tasks, timeout=timeout_s)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        return [t.result() if t in done else Reply(error=f"no answer within {timeout_s:g} s")
                for t in tasks]


def post_all(base_url: str, path: str, payloads: list[dict], *, concurrency: int = 8,
             api_key: str | None = None, timeout_s: float = 600.0) -> list[Reply]:
    """POST each payload to ``base_url + path``, at most ``concurrency`` in flight, all within
    ``timeout_s``; the replies in the payloads' order."""
    if not payloads:
        return []
    return asyncio.run(_post_all(base_url, path, payloads, concurrency, api_key, timeout_s))
