"""A zero-latency OpenAI-style streaming server, for measuring benchmark clients (not engines).

It answers /v1/completions and /v1/chat/completions with the SSE chunk shapes of vLLM, SGLang or
TRT-LLM (their stream response models: vllm/entrypoints/openai/completion/protocol.py,
python/sglang/srt/entrypoints/openai/protocol.py, tensorrt_llm/serve/openai_protocol.py), one chunk
per token, as fast as the socket takes them (or with a fixed gap per token). Plain asyncio streams,
HTTP/1.1 keep-alive, chunked transfer encoding: no dependencies, so it runs from any Python 3.11
(ours or the vLLM venv's).

    python benchmarks/stub_server.py --port 0 [--shape vllm|sglang|trtllm] [--itl-ms 0]
prints "READY <port>" on stdout once listening.

GET /stats returns, and then resets, the window in which it served completions and its own
first-token time per completion: from having read the request head to writing the first token
chunk (time.perf_counter), a reference a client's TTFT can be compared with
(benchmarks/ttft_overhead.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import threading
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class StubOptions:
    shape: str = "vllm"            # vllm | sglang | trtllm
    itl_ms: float = 0.0            # gap between tokens; 0 = as fast as possible
    ttft_ms: float = 0.0
    tokens: int | None = None      # override max_tokens
    send_done: bool = True         # transformers serve ends without "data: [DONE]"
    send_usage: bool = True
    reject_fields: tuple[str, ...] = ()  # answer 422 when the body has any of these (transformers serve)
    token_text: str = " tok"


class StubServer:
    def __init__(self, options: StubOptions) -> None:
        self.options = options
        self.requests = 0
        self.inflight = 0
        self.max_inflight = 0
        self.bodies: list[dict] = []  # request bodies, for tests
        self.headers: list[dict] = []
        self._step: _Stepper | None = None
        # The window in which it served completions, for measuring a client's CPU over exactly
        # that time (GET /stats returns it and starts a new window).
        self.first_request_at: float | None = None
        self.last_response_end_at: float | None = None
        # Seconds from having read a completion request's head to writing its first token chunk.
        self.first_token_s: list[float] = []

    def _stepper(self) -> "_Stepper":
        if self._step is None:
            self._step = _Stepper(self.options.itl_ms / 1000)
        return self._step

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                head_at = time.perf_counter()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {}
                for line in lines[1:]:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                length = int(headers.get("content-length", "0"))
                body = await reader.readexactly(length) if length else b""
                keep_alive = headers.get("connection", "").lower() != "close"
                self.requests += 1
                self.inflight += 1
                self.max_inflight = max(self.max_inflight, self.inflight)
                completion = path.split("?", 1)[0].endswith("completions")
                if completion and self.first_request_at is None:
                    self.first_request_at = time.time()
                try:
                    await self.respond(method, path, body, writer, headers, head_at)
                finally:
                    self.inflight -= 1
                    if completion:
                        self.last_response_end_at = time.time()
                if not keep_alive:
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def respond(self, method: str, path: str, body: bytes,
                      writer: asyncio.StreamWriter, headers: dict | None = None,
                      head_at: float | None = None) -> None:
        path = path.split("?", 1)[0]
        if method == "GET" and path in ("/health", "/v1/models"):
            doc = {"object": "list", "data": [{"id": "stub", "object": "model"}]}
            return await _send_json(writer, 200, doc if path == "/v1/models" else {})
        if method == "GET" and path == "/stats":
            ft = self.first_token_s
            window = {"first_request_at": self.first_request_at,
                      "last_response_end_at": self.last_response_end_at,
                      "first_token_count": len(ft),
                      "first_token_mean_ms": 1000 * statistics.fmean(ft) if ft else None,
                      "first_token_median_ms": 1000 * statistics.median(ft) if ft else None}
            self.first_request_at = self.last_response_end_at = None
            self.first_token_s = []
            return await _send_json(writer, 200, window)
        if method != "POST" or not path.endswith("completions"):
            return await _send_json(writer, 404, {"error": f"no route {method} {path}"})
        try:
            req = json.loads(body)
        except ValueError:
            return await _send_json(writer, 400, {"error": "body is not JSON"})
        if len(self.bodies) < 10_000:
            self.bodies.append(req)
            self.headers.append(headers or {})
        bad = [f for f in self.options.reject_fields if f in req]
        if bad:
            return await _send_json(writer, 422, {"detail": [
                {"type": "extra_forbidden", "loc": ["body", f], "msg": "Extra inputs are not permitted"}
                for f in bad]})
        chat = path.endswith("chat/completions")
        n = self.options.tokens or int(req.get("max_completion_tokens" if chat else "max_tokens")
                                       or req.get("max_tokens") or 16)
        prompt = req.get("prompt") if not chat else json.dumps(req.get("messages"))
        prompt_tokens = max(1, len(str(prompt)) // 4)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        events = _Events(self.options, str(req.get("model", "stub")), chat)
        if self.options.ttft_ms:
            await asyncio.sleep(self.options.ttft_ms / 1000)
        if chat:
            _chunk(writer, events.role())
        if head_at is None:
            head_at = time.perf_counter()
        if self.options.itl_ms:
            await self._stepper().join(writer, events, n, head_at, self.first_token_s)
        else:
            for i in range(n):
                _chunk(writer, events.token(last=i == n - 1))
                if i == 0:
                    self.first_token_s.append(time.perf_counter() - head_at)
                await writer.drain()
                if i % 16 == 15:
                    await asyncio.sleep(0)  # let other streams interleave, as an engine's batch would
        if chat and self.options.shape == "sglang":
            _chunk(writer, events.finish())
        if self.options.send_usage:
            _chunk(writer, events.usage(prompt_tokens, n))
        if self.options.send_done:
            _chunk(writer, b"data: [DONE]\n\n")
        writer.write(b"0\r\n\r\n")
        await writer.drain()


class _Stepper:
    """Paced streams advance together, one token each per step, as an engine's decode batch does.

    A timer per stream would make the stub itself the bottleneck at a few hundred streams; one
    timer per step keeps its cost at a socket write per token.
    """

    def __init__(self, step_s: float) -> None:
        self.step_s = step_s
        self.active: dict[asyncio.StreamWriter, list] = {}
        self.task: asyncio.Task | None = None

    async def join(self, writer: asyncio.StreamWriter, events: "_Events", n: int,
                   head_at: float, first_token_s: list[float]) -> None:
        """Stream ``n`` tokens; the time from ``head_at`` to the first is appended to
        ``first_token_s``."""
        done = asyncio.get_running_loop().create_future()
        self.active[writer] = [events, n, 0, done, head_at, first_token_s]
        if self.task is None or self.task.done():
            self.task = asyncio.create_task(self._run())
        await done
        await writer.drain()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        next_step = loop.time()
        while self.active:
            for writer, state in list(self.active.items()):
                events, n, i, done, head_at, first_token_s = state
                if writer.is_closing():
                    del self.active[writer]
                    done.set_result(None)
                    continue
                _chunk(writer, events.token(last=i == n - 1))
                if i == 0:
                    first_token_s.append(time.perf_counter() - head_at)
                state[2] = i + 1
                if i + 1 >= n:
                    del self.active[writer]
                    done.set_result(None)
            next_step += self.step_s
            await asyncio.sleep(max(0.0, next_step - loop.time()))


class _Events:
    """Pre-rendered SSE events: the per-token cost of the stub must stay far below the client's."""

    def __init__(self, o: StubOptions, model: str, chat: bool) -> None:
        self.o, self.model, self.chat = o, model, chat
        self._token = self._render(self._token_doc(finish=None))
        self._last = self._render(self._token_doc(finish="length"))

    def _render(self, doc: dict) -> bytes:
        text = json.dumps(doc, separators=(",", ":"))
        if self.o.shape == "trtllm":
            return f"data: {text} \n\n".encode()  # TRT-LLM leaves a space before the blank line
        return f"data: {text}\n\n".encode()

    def _base(self) -> dict:
        obj = "chat.completion.chunk" if self.chat else "text_completion"
        return {"id": "cmpl-stub", "object": obj, "created": 0, "model": self.model}

    def _token_doc(self, finish: str | None) -> dict:
        doc = self._base()
        if self.chat:
            delta: dict = {"content": self.o.token_text}
            if self.o.shape == "sglang":
                delta = {"role": None, "content": self.o.token_text}
                finish = None  # SGLang sends the finish reason in a separate chunk
            doc["choices"] = [{"index": 0, "delta": delta, "logprobs": None,
                               "finish_reason": finish}]
        else:
            choice = {"index": 0, "text": self.o.token_text, "logprobs": None,
                      "finish_reason": finish}
            if self.o.shape == "vllm":
                choice["stop_reason"] = None
            doc["choices"] = [choice]
            if self.o.shape == "sglang":
                doc["usage"] = None
        return doc

    def token(self, last: bool) -> bytes:
        return self._last if last else self._token

    def role(self) -> bytes:
        doc = self._base()
        delta = {"role": "assistant"} if self.o.shape == "trtllm" else {"role": "assistant", "content": ""}
        doc["choices"] = [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}]
        return self._render(doc)

    def finish(self) -> bytes:
        doc = self._base()
        doc["choices"] = [{"index": 0, "delta": {"role": None, "content": ""},
                           "finish_reason": "length"}]
        return self._render(doc)

    def usage(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        doc = self._base()
        if self.o.shape == "trtllm":
            doc["object"] = "chat.completion.chunk"
        doc["choices"] = []
        doc["usage"] = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                        "total_tokens": prompt_tokens + completion_tokens}
        return self._render(doc)


def _chunk(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(b"%x\r\n%s\r\n" % (len(data), data))


async def _send_json(writer: asyncio.StreamWriter, status: int, doc: dict) -> None:
    body = json.dumps(doc).encode()
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 422: "Unprocessable Entity"}[status]
    writer.write(f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
                 f"content-length: {len(body)}\r\n\r\n".encode() + body)
    await writer.drain()


async def serve(options: StubOptions, host: str = "127.0.0.1", port: int = 0,
                on_ready=None) -> None:
    stub = StubServer(options)
    server = await asyncio.start_server(stub.handle, host, port, backlog=4096, limit=1 << 20)
    bound = server.sockets[0].getsockname()[1]
    if on_ready is not None:
        on_ready(bound, stub, server, asyncio.get_running_loop())
    else:
        print(f"READY {bound}", flush=True)
    async with server:
        try:
            await server.serve_forever()
        except asyncio.CancelledError:
            pass


class RunningStub:
    """A stub served from a background thread (tests): ``.port``, ``.stub``, ``.url``, ``.stop()``."""

    def __init__(self, options: StubOptions | None = None) -> None:
        ready = threading.Event()
        box: list = []

        def on_ready(*args) -> None:
            box.append(args)
            ready.set()

        self._thread = threading.Thread(
            target=lambda: asyncio.run(serve(options or StubOptions(), on_ready=on_ready)),
            daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("stub server did not start")
        self.port, self.stub, self._server, self._loop = box[0]
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self._loop.call_soon_threadsafe(self._server.close)
        self._thread.join(5)

    def __enter__(self) -> "RunningStub":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--shape", choices=("vllm", "sglang", "trtllm"), default="vllm")
    ap.add_argument("--itl-ms", type=float, default=0.0)
    ap.add_argument("--ttft-ms", type=float, default=0.0)
    ap.add_argument("--tokens", type=int, default=None, help="override max_tokens of every request")
    ap.add_argument("--no-done", action="store_true", help="end streams without data: [DONE]")
    ap.add_argument("--no-usage", action="store_true")
    ap.add_argument("--reject-field", action="append", default=[],
                    help="answer 422 when the request body has this field (repeatable)")
    a = ap.parse_args(argv)
    opts = StubOptions(shape=a.shape, itl_ms=a.itl_ms, ttft_ms=a.ttft_ms, tokens=a.tokens,
                       send_done=not a.no_done, send_usage=not a.no_usage,
                       reject_fields=tuple(a.reject_field))
    try:
        asyncio.run(serve(opts, a.host, a.port))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
