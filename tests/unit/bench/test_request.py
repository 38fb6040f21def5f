"""The request function: payloads, chunk counting per server shape, and failure handling.

Runs against a raw local HTTP server that sends each response body in exactly the pieces we choose,
one HTTP chunk per piece, so the real transport and parsers see what a real server sends.
"""

import asyncio
import dataclasses
import http
import json
import socket

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.bench.config import BenchConfig
from tuner.bench.datasets import SampleRequest
from tuner.bench.http import HTTPClient
from tuner.bench.request import NO_TOKEN_ERROR, build_payload, send_request

COMPLETIONS = BenchConfig(base_url="http://server", model="served", tokenizer="unused")
CHAT = BenchConfig(base_url="http://server", model="served", tokenizer="unused",
                   endpoint="/v1/chat/completions")
REQ = SampleRequest(prompt="hello", prompt_len=7, expected_output_len=3)


def _completion(text: str, finish=None) -> dict:
    return {"object": "text_completion", "choices": [
        {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}]}


def _chat(delta: dict, finish=None) -> dict:
    return {"object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": delta, "finish_reason": finish}]}


def _usage(completion: int, prompt: int = 11) -> dict:
    return {"choices": [], "usage": {"prompt_tokens": prompt, "completion_tokens": completion,
                                     "total_tokens": prompt + completion}}


def _body(docs: list, done: bool = True) -> bytes:
    out = "".join(f"data: {json.dumps(d)}\n\n" for d in docs)
    return (out + ("data: [DONE]\n\n" if done else "")).encode()


@dataclasses.dataclass
class _Response:
    """What the raw server answers: the body in pieces (a float piece = pause that long), then
    the end of the body, or an abrupt close when ``cut`` is set."""

    pieces: list
    status: int = 200
    cut: bool = False
    seen: list | None = None


def _serve(body: bytes | list, status: int = 200, cut: bool = False, seen=None) -> _Response:
    return _Response([body] if isinstance(body, bytes) else list(body), status, cut, seen)


async def _answer(response: _Response, reader: asyncio.StreamReader,
                  writer: asyncio.StreamWriter) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:] if x)}
    body = await reader.readexactly(int(headers.get("content-length", 0)))
    if response.seen is not None:
        response.seen.append((lines[0], headers, body))
    phrase = http.HTTPStatus(response.status).phrase
    writer.write(f"HTTP/1.1 {response.status} {phrase}\r\nTransfer-Encoding: chunked\r\n"
                 "Content-Type: text/event-stream\r\n\r\n".encode())
    for piece in response.pieces:
        if isinstance(piece, float):
            await asyncio.sleep(piece)
        elif piece:
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
    if response.cut:
        writer.transport.abort()
        return
    writer.write(b"0\r\n\r\n")
    await writer.drain()
    writer.close()


def _send(config: BenchConfig, response: _Response | None, request: SampleRequest = REQ,
          request_id=None):
    """Send one request to a raw server answering ``response`` (None: nothing listens)."""
    async def go():
        if response is None:
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]
            server = None
        else:
            server = await asyncio.start_server(lambda r, w: _answer(response, r, w), "127.0.0.1", 0)
            port = server.sockets[0].getsockname()[1]
        cfg = dataclasses.replace(config, base_url=f"http://127.0.0.1:{port}")
        try:
            async with HTTPClient(cfg.base_url) as client:
                return await send_request(client, cfg, request, request_id)
        finally:
            if server is not None:
                server.close()
    return asyncio.run(go())


# --------------------------------------------------------------------------- payloads

def test_completions_payload_matches_vllm_openai_backend():
    p = build_payload(COMPLETIONS, "hi", 5)
    assert p == {"model": "served", "prompt": "hi", "repetition_penalty": 1.0, "max_tokens": 5,
                 "logprobs": None, "stream": True, "stream_options": {"include_usage": True},
                 "ignore_eos": True, "temperature": 0.0}


def test_chat_payload_uses_content_parts_and_max_completion_tokens():
    p = build_payload(CHAT, "hi", 5)
    assert p["messages"] == [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]
    assert p["max_completion_tokens"] == 5 and "max_tokens" not in p
    assert "repetition_penalty" not in p and "logprobs" not in p


def test_omit_fields_drop_what_a_server_rejects():
    cfg = BenchConfig(base_url="http://s", model="m", tokenizer="t",
                      omit_fields=frozenset({"ignore_eos", "repetition_penalty", "logprobs"}))
    p = build_payload(cfg, "hi", 5)
    assert not {"ignore_eos", "repetition_penalty", "logprobs"} & set(p)
    assert build_payload(BenchConfig(base_url="http://s", model="m", tokenizer="t",
                                     ignore_eos=False), "x", 1).get("ignore_eos") is None


def test_request_carries_json_body_and_request_id():
    seen: list = []
    _send(COMPLETIONS, _serve(_body([_completion("a")]), seen=seen), request_id="bench-x-3")
    ((request_line, headers, body),) = seen
    assert request_line == "POST /v1/completions HTTP/1.1"
    assert headers["x-request-id"] == "bench-x-3"
    assert headers["content-type"] == "application/json"
    assert headers["host"].startswith("127.0.0.1:")
    assert json.loads(body)["max_tokens"] == 3


# --------------------------------------------------------------------------- chunk counting

def test_completions_every_chunk_with_choices_counts_even_empty_text():
    body = _body([_completion("a"), _completion(""), _completion("c", "length"), _usage(3)])
    out = _send(COMPLETIONS, _serve(body))
    assert out.success and out.error == ""
    assert len(out.itl) == 2 and out.ttft > 0
    assert out.generated_text == "ac"
    assert out.output_tokens == 3
    assert out.prompt_len == 11  # the server's count replaces the dataset's
    assert out.latency >= out.ttft + sum(out.itl) - 1e-9


def test_vllm_chat_role_chunk_does_not_count():
    body = _body([_chat({"role": "assistant", "content": ""}), _chat({"content": "x"}),
                  _chat({"content": "y"}, "length"), _usage(2)])
    out = _send(CHAT, _serve(body))
    assert out.success and len(out.itl) == 1 and out.generated_text == "xy"


def test_sglang_chat_null_role_and_separate_finish_chunk_do_not_count():
    body = _body([_chat({"role": "assistant", "content": ""}), _chat({"role": None, "content": "x"}),
                  _chat({"role": None, "content": "y"}), _chat({"role": None, "content": ""}, "length"),
                  _usage(2)])
    out = _send(CHAT, _serve(body))
    assert out.success and len(out.itl) == 1


def test_trtllm_chat_role_without_content_and_usage_object_name():
    usage = _usage(2) | {"object": "chat.completion.chunk"}
    body = _body([_chat({"role": "assistant"}), _chat({"content": "x"}), _chat({"content": "y"}),
                  usage], done=True)
    out = _send(CHAT, _serve(body))
    assert out.success and len(out.itl) == 1 and out.output_tokens == 2


def test_chat_empty_content_without_role_and_reasoning_count():
    body = _body([_chat({"content": ""}), _chat({"reasoning": "hm"}), _chat({"tool_calls": [{}]})])
    out = _send(CHAT, _serve(body))
    assert out.success and len(out.itl) == 2


def test_stream_without_done_or_usage_succeeds():
    out = _send(COMPLETIONS, _serve(_body([_completion("a"), _completion("b")], done=False)))
    assert out.success and out.output_tokens is None and out.generated_text == "ab"


def test_stream_pieces_split_inside_a_multibyte_character():
    body = _body([_completion("日本語"), _usage(1)]).replace(
        b"\\u65e5\\u672c\\u8a9e", "日本語".encode())
    at = body.index("本".encode()) + 2
    out = _send(COMPLETIONS, _serve([body[:at], body[at:]]))
    assert out.success and out.generated_text == "日本語"


# --------------------------------------------------------------------------- failures

def test_non_200_reports_status_and_body_excerpt():
    out = _send(COMPLETIONS, _serve(b'{"detail":[{"loc":["body","ignore_eos"],'
                                    b'"msg":"Extra inputs are not permitted"}]}', status=422))
    assert not out.success
    assert out.error.startswith("HTTP 422 Unprocessable Entity: ")
    assert "ignore_eos" in out.error


def test_usage_only_stream_has_no_first_token():
    out = _send(COMPLETIONS, _serve(_body([_usage(3)])))
    assert not out.success and out.error == NO_TOKEN_ERROR


def test_garbage_json_fails_that_request_with_a_short_reason():
    out = _send(COMPLETIONS, _serve(_body([_completion("a")]) + b"data: {not json\n\n"))
    assert not out.success and out.error.startswith("malformed stream: JSONDecodeError")


def test_json_of_the_wrong_shape_fails_cleanly():
    for junk in (b"data: 5\n\n", b'data: {"choices": "abc"}\n\n', b'data: {"choices": [3]}\n\n'):
        out = _send(COMPLETIONS, _serve(junk))
        assert not out.success and out.error.startswith("malformed stream"), junk


def test_invalid_utf8_fails_cleanly():
    out = _send(COMPLETIONS, _serve(b"data: {\"choices\": [{\"text\": \"\xff\xfe\"}]}\n\n"))
    assert not out.success and "UTF-8" in out.error


def test_connection_error_is_one_line():
    out = _send(COMPLETIONS, None)
    assert not out.success
    assert out.error.startswith("ConnectError: cannot connect to 127.0.0.1:")
    assert out.error.endswith("Connection refused") and "\n" not in out.error


def test_stream_broken_midway_fails():
    out = _send(COMPLETIONS, _serve(_body([_completion("a")], done=False), cut=True))
    assert not out.success
    assert out.error == "RemoteProtocolError: server closed the connection mid-response"


def test_timeout_is_reported():
    cfg = BenchConfig(base_url="http://server", model="m", tokenizer="t", request_timeout_s=0.05)
    out = _send(cfg, _serve([_body([_completion("a")]), 5.0]))
    assert not out.success and out.error == "timed out after 0.05 s"


# --------------------------------------------------------------------------- fuzzing

GOOD = _body([_completion("a"), _completion("b"), _completion("c", "length"), _usage(3)])
TOKEN_ENDS = [GOOD.index(b"}]}", i) + 3 for i in
              (GOOD.index(b'"a"'), GOOD.index(b'"b"'), GOOD.index(b'"c"'))]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cut=st.integers(min_value=0, max_value=len(GOOD)),
       splits=st.lists(st.integers(min_value=0, max_value=len(GOOD)), max_size=5))
def test_truncated_stream_succeeds_iff_a_whole_token_chunk_arrived(cut, splits):
    body = GOOD[:cut]
    points = sorted({s for s in splits if s < cut})
    pieces = [body[a:b] for a, b in zip([0] + points, points + [cut])]
    out = _send(COMPLETIONS, _serve(pieces))
    complete = sum(end <= cut for end in TOKEN_ENDS)
    assert out.success == (complete > 0)
    if out.success:
        assert len(out.itl) == complete - 1
    else:
        assert out.error == NO_TOKEN_ERROR


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(status=st.sampled_from([200, 200, 200, 400, 404, 422, 500, 503]),
       pieces=st.lists(st.one_of(
           st.binary(max_size=40),
           st.sampled_from([b"data: ", b"\n\n", b"[DONE]", b": ping\n\n", b"{", b"}",
                            b'{"choices": [', b'"text": "x"', b'{"usage": {"completion_tokens": 2}}',
                            _body([_completion("z")]), b'data: {"choices": [{"delta": null}]}\n\n']),
       ), max_size=10),
       chat=st.booleans())
def test_request_function_never_raises_on_garbage(status, pieces, chat):
    out = _send(CHAT if chat else COMPLETIONS, _serve(pieces, status=status))
    if out.success:
        assert status == 200 and out.error == "" and out.ttft >= 0 and out.latency >= out.ttft
    else:
        assert out.error and out.itl == []
    if status != 200:
        assert not out.success and out.error.startswith(f"HTTP {status}")


@pytest.mark.parametrize("config", [COMPLETIONS, CHAT])
def test_empty_200_body_is_a_failure(config):
    out = _send(config, _serve(b""))
    assert not out.success and out.error == NO_TOKEN_ERROR
