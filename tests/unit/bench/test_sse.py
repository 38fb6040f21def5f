"""SSE parsing of real servers' chunk shapes (the stream response models of vLLM, SGLang and
TensorRT-LLM, as benchmarks/stub_server.py serves them), split anywhere, plus fuzzing."""

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from tuner.bench.sse import DONE, SSEParser


def _parse(chunks: list[bytes]) -> list[str]:
    p = SSEParser()
    out: list[str] = []
    for c in chunks:
        out.extend(p.feed(c))
    out.extend(p.finish())
    return out


def _sse(docs: list, *, sep: str = "data: ", end: str = "\n\n", done: bool = True) -> bytes:
    text = "".join(f"{sep}{json.dumps(d)}{end}" for d in docs)
    if done:
        text += f"{sep}[DONE]{end}"
    return text.encode()


VLLM_COMPLETIONS = [
    {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
     "choices": [{"index": 0, "text": " Hello", "logprobs": None, "finish_reason": None,
                  "stop_reason": None}]},
    {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
     "choices": [{"index": 0, "text": "", "logprobs": None, "finish_reason": "length",
                  "stop_reason": None}]},
    {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m", "choices": [],
     "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}},
]
SGLANG_CHAT = [
    {"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]},
    {"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"role": None, "content": "日本"}, "finish_reason": None}]},
    {"id": "x", "object": "chat.completion.chunk", "choices": [
        {"index": 0, "delta": {"role": None, "content": ""}, "finish_reason": "length"}]},
    {"id": "x", "object": "chat.completion.chunk", "choices": [],
     "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4}},
]
TRTLLM_COMPLETIONS = [
    {"id": "t", "object": "text_completion", "choices": [
        {"index": 0, "text": "é", "logprobs": None, "finish_reason": None}], "usage": None},
    {"id": "t", "object": "chat.completion.chunk", "choices": [],
     "usage": {"prompt_tokens": 3, "completion_tokens": 1}},
]


def test_vllm_completions_stream_split_at_every_byte():
    body = _sse(VLLM_COMPLETIONS)
    expected = [json.dumps(d) for d in VLLM_COMPLETIONS] + [DONE]
    assert _parse([body]) == expected
    for cut in range(1, len(body)):
        assert _parse([body[:cut], body[cut:]]) == expected, cut


def test_multibyte_character_split_across_reads():
    body = _sse(SGLANG_CHAT, done=False).replace(b"\\u65e5\\u672c", "日本".encode())
    assert "日本".encode() in body
    at = body.index("日本".encode()) + 1  # inside the first character's three bytes
    payloads = _parse([body[:at], body[at:at + 1], body[at + 1:]])
    assert json.loads(payloads[1])["choices"][0]["delta"]["content"] == "日本"
    assert len(payloads) == len(SGLANG_CHAT)


def test_trtllm_space_before_blank_line_and_no_space_after_colon():
    body = _sse(TRTLLM_COMPLETIONS, end=" \n\n")
    assert [json.loads(p) if p != DONE else p for p in _parse([body])] == TRTLLM_COMPLETIONS + [DONE]
    body = _sse(TRTLLM_COMPLETIONS, sep="data:")
    assert len(_parse([body])) == 3


def test_comments_and_field_only_messages_are_skipped():
    body = b": ping\n\nevent: message\nid: 4\n\n" + _sse(VLLM_COMPLETIONS[:1]) + b": bye\n\n"
    assert _parse([body]) == [json.dumps(VLLM_COMPLETIONS[0]), DONE]


def test_crlf_line_endings_even_split_between_cr_and_lf():
    body = _sse(VLLM_COMPLETIONS, end="\r\n\r\n")
    cut = body.index(b"\r\n") + 1
    assert _parse([body[:cut], body[cut:]]) == [json.dumps(d) for d in VLLM_COMPLETIONS] + [DONE]


def test_multiline_data_field_is_joined():
    assert _parse([b'data: {"a":\ndata: 1}\n\n']) == ['{"a":\n1}']


def test_unterminated_last_message_counts_only_when_complete():
    # transformers serve style: no [DONE]; last message without the blank line.
    body = _sse(VLLM_COMPLETIONS[:1], done=False).rstrip(b"\n")
    assert _parse([body]) == [json.dumps(VLLM_COMPLETIONS[0])]
    truncated = body[:-3]
    assert _parse([truncated]) == []


def test_trailing_complete_json_is_emitted_before_the_blank_line_arrives():
    p = SSEParser()
    line = b"data: " + json.dumps(VLLM_COMPLETIONS[0]).encode()
    assert p.feed(line) == [json.dumps(VLLM_COMPLETIONS[0])]
    assert p.feed(b"\n\n") == []
    assert p.feed(b"data: [DONE]") == [DONE]


def test_bare_json_without_data_prefix_passes_through_like_vllm():
    assert _parse([b'{"choices": []}\n\n']) == ['{"choices": []}']


def test_empty_data_is_a_keep_alive():
    assert _parse([b"data:\n\ndata: \n\n"]) == []


# --------------------------------------------------------------------------- fuzzing

json_docs = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=6,
).map(lambda leaf: {"choices": [{"text": leaf}]})


@settings(max_examples=200, deadline=None)
@given(docs=st.lists(json_docs, min_size=1, max_size=6),
       sep=st.sampled_from(["data: ", "data:"]),
       end=st.sampled_from(["\n\n", "\r\n\r\n", " \n\n"]),
       comments=st.booleans(),
       cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=12))
def test_any_valid_stream_split_anywhere_yields_the_same_documents(docs, sep, end, comments, cuts):
    text = ""
    for d in docs:
        if comments:
            text += ": keep-alive" + end
        text += sep + json.dumps(d, ensure_ascii=False) + end
    body = text.encode()
    points = sorted({c % (len(body) + 1) for c in cuts})
    pieces = [body[a:b] for a, b in zip([0] + points, points + [len(body)])]
    assert [json.loads(p) for p in _parse(pieces)] == docs


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_garbage_bytes_never_raise_anything_but_decode_errors(chunks):
    p = SSEParser()
    for c in chunks:
        try:
            payloads = p.feed(c)
        except UnicodeDecodeError:
            return
        assert all(isinstance(x, str) and x for x in payloads)
    assert all(isinstance(x, str) for x in p.finish())
