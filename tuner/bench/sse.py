"""Incremental Server-Sent-Events parser for OpenAI-style token streams.

It follows the message boundaries that ``vllm bench serve`` (vLLM 0.33) uses, so both clients see
the same number of chunks from the same stream, and it is lenient where vLLM needlessly fails a
request: ``data:`` without a space, CRLF line endings and multi-line ``data`` fields are accepted.

Why incremental UTF-8 decoding: a server is free to cut its body anywhere, including inside a
multi-byte character; decoding each network read on its own (what vLLM 0.11 did) turns a perfectly
good request into a failure.
"""

from __future__ import annotations

import codecs
import json

DONE = "[DONE]"
_FIELDS_WITHOUT_PAYLOAD = ("event:", "id:", "retry:")


class SSEParser:
    """Turns raw body bytes, fed as they arrive, into the payload strings of complete SSE messages.

    ``feed`` returns payloads (the text after ``data:``, ``"[DONE]"`` included); comments and
    field-only messages yield nothing. A message without any ``data:`` line is passed through whole,
    because vLLM's client treats such text as JSON too and servers exist that send bare JSON lines.
    """

    __slots__ = ("_buffer", "_decoder")

    def __init__(self) -> None:
        self._buffer = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def feed(self, data: bytes) -> list[str]:
        """Payloads completed by ``data``; raises UnicodeDecodeError on invalid UTF-8."""
        text = self._decoder.decode(data)
        if not text:
            return []
        if "\r" in text or self._buffer.endswith("\r"):
            text = (self._buffer + text).replace("\r\n", "\n")
            self._buffer = ""
        buffer = self._buffer + text if self._buffer else text
        out: list[str] = []
        if "\n\n" in buffer:
            parts = buffer.split("\n\n")
            buffer = parts.pop()
            for message in parts:
                # The shape every engine streams, "data: {...}", skips the general rules.
                if message.startswith("data: ") and "\n" not in message:
                    payload = message[6:].strip() or None
                else:
                    payload = _payload(message.strip())
                if payload is not None:
                    out.append(payload)
        self._buffer = buffer
        # vLLM emits an unterminated trailing "data: ..." early once it is complete JSON or [DONE]:
        # servers that end the body without the final blank line still get their last chunk counted.
        if buffer.startswith("data:"):
            payload = _complete_trailing(buffer)
            if payload is not None:
                out.append(payload)
                self._buffer = ""
        return out

    def finish(self) -> list[str]:
        """Payloads left at end of stream: only a complete trailing message counts, as in vLLM."""
        try:
            tail = self._decoder.decode(b"", final=True)
        except UnicodeDecodeError:
            tail = ""  # a body cut inside a character: the partial character is dropped
        buffer = (self._buffer + tail).strip()
        self._buffer = ""
        if not buffer:
            return []
        payload = _payload(buffer)
        if payload is None:
            return []
        if payload == DONE or _is_json(payload):
            return [payload]
        return []

    @property
    def pending(self) -> str:
        """Text received but not yet part of a complete message (for error reports)."""
        return self._buffer


def _payload(message: str) -> str | None:
    if not message or message.startswith(":"):
        return None
    if "\n" not in message:
        if message.startswith("data:"):
            return message[5:].strip() or None  # an empty data field is a keep-alive, not a chunk
        if message.startswith(_FIELDS_WITHOUT_PAYLOAD):
            return None
        return message
    data_lines: list[str] = []
    only_fields = True
    for line in message.split("\n"):  # not splitlines(): U+2028 is legal unescaped inside JSON
        if line.startswith("data:"):
            data_lines.append(line[5:].removeprefix(" "))
        elif not (line.startswith(":") or line.startswith(_FIELDS_WITHOUT_PAYLOAD)):
            only_fields = False
    if data_lines:
        return "\n".join(data_lines).strip() or None
    return None if only_fields else message


def _complete_trailing(buffer: str) -> str | None:
    content = buffer[5:].strip()
    if not content or "\n" in content:
        return None
    if content == DONE or _is_json(content):
        return content
    return None


def _is_json(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True
