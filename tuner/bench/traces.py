"""Request traces replayed at their recorded times: Mooncake JSONL and BurstGPT CSV.

Mooncake's format (github.com/kvcache-ai/Mooncake, FAST'25 traces; also AIPerf's
``mooncake_trace``): one JSON object per line with ``timestamp`` (ms), ``input_length``,
``output_length`` and ``hash_ids``, the ids of the prompt's 512-token blocks; requests that share
a block id share that block of prompt. Prompts are built so that they do on the wire: each block id
becomes a fixed run of tokens (drawn from a generator seeded by the id), so equal ids give equal
text and a prefix cache sees the trace's sharing. Tokens beyond the listed blocks are the request's
own.

BurstGPT's CSV (github.com/HPMLL/BurstGPT) has ``Timestamp`` (s), ``Model``, ``Request tokens``,
``Response tokens``, ``Total tokens`` and ``Log Type``; it records no sharing. Rows with 0 response
tokens are requests that failed in the trace; they are skipped, as vLLM's ``BurstGPTDataset``
skips them, and counted in the summary.

Send times are the trace's, relative to its first request and multiplied by ``time_scale``.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tuner.bench.prompts import SampleRequest, allowed_ids, fit_to_len
from tuner.bench.rows import csv_rows, field, jsonl_rows
from tuner.errors import BenchInputError

WHAT = "trace"
BURSTGPT_COLUMNS = ("Timestamp", "Request tokens", "Response tokens")
_OWN = 1 << 62  # generator stream of a request's own tokens, apart from every block id


@dataclass(frozen=True)
class TraceRow:
    time_s: float
    input_len: int
    output_len: int
    hash_ids: tuple[int, ...]
    line: int


@dataclass(frozen=True)
class Trace:
    rows: tuple[TraceRow, ...]
    skipped_failed: int = 0  # BurstGPT rows of requests that failed when recorded


def read_trace(path: str | os.PathLike[str]) -> Trace:
    """The whole trace, checked: a ``.csv`` file is read as BurstGPT, anything else as Mooncake."""
    try:
        st = os.stat(Path(path).expanduser())
        stamp: Any = (st.st_mtime_ns, st.st_size)
    except OSError:
        stamp = None  # the reader reports the missing file
    return _read_cached(os.fspath(path), stamp)


@functools.lru_cache(maxsize=4)
def _read_cached(path: str, stamp: Any) -> Trace:
    trace = _read_burstgpt(path) if path.lower().endswith(".csv") else _read_mooncake(path)
    if not trace.rows:
        raise BenchInputError(f"{WHAT} {path}: no requests")
    return trace


def _read_mooncake(path: str) -> Trace:
    rows: list[TraceRow] = []
    for lineno, row in jsonl_rows(path, WHAT):
        where = f"{WHAT} {path} line {lineno}"
        t = field(row, "timestamp", where, kind="float", minimum=0, maximum=None)
        ids = row.get("hash_ids", [])
        if not isinstance(ids, list) or not all(
                isinstance(i, int) and not isinstance(i, bool) and 0 <= i < _OWN for i in ids):
            raise BenchInputError(f"{where}: 'hash_ids' must be a list of non-negative integers, "
                                  f"got {ids!r:.60}")
        rows.append(_checked(rows, TraceRow(t / 1000.0, field(row, "input_length", where),
                                            field(row, "output_length", where), tuple(ids), lineno),
                             where))
    return Trace(tuple(rows))


def _read_burstgpt(path: str) -> Trace:
    rows: list[TraceRow] = []
    failed = 0
    for lineno, row in csv_rows(path, WHAT, BURSTGPT_COLUMNS):
        where = f"{WHAT} {path} line {lineno}"
        t = field(row, "Timestamp", where, kind="float", minimum=0, maximum=None)
        request = field(row, "Request tokens", where)
        response = field(row, "Response tokens", where, minimum=0)
        if response == 0:
            failed += 1
            continue
        rows.append(_checked(rows, TraceRow(t, request, response, (), lineno), where))
    return Trace(tuple(rows), failed)


def _checked(rows: list[TraceRow], row: TraceRow, where: str) -> TraceRow:
    if rows and row.time_s < rows[-1].time_s:
        raise BenchInputError(f"{where}: out of time order (earlier than line {rows[-1].line}); "
                              "sort the trace by its timestamps")
    return row


def sample_trace(path: str | os.PathLike[str], tokenizer: Any, num_requests: int, *,
                 time_scale: float = 1.0, block_size: int = 512,
                 seed: int = 0) -> list[SampleRequest]:
    """The trace's first ``num_requests`` requests, with prompts and send times."""
    rows = read_trace(path).rows[:num_requests]
    allowed = allowed_ids(tokenizer)
    blocks: dict[tuple[int, int], str] = {}

    def block_text(key: int, n: int) -> str:
        # Each block on its own re-encodes to its length (vLLM's retry rule), so a prompt's length
        # is close to the trace's; a block id names its tokens, a partial block's too (Mooncake
        # hashes the tokens a block holds).
        text = blocks.get((key, n))
        if text is None:
            rng = np.random.default_rng([seed, key])
            ids = allowed[rng.integers(0, len(allowed), size=block_size)][:n].tolist()
            text = blocks[(key, n)] = fit_to_len(tokenizer, ids, n, rng)[0]
        return text

    t0 = rows[0].time_s
    out = []
    for row in rows:
        parts, left = [], row.input_len
        for key in row.hash_ids:
            if left <= 0:
                break
            parts.append(block_text(key, min(left, block_size)))
            left -= block_size
        if left > 0:
            rng = np.random.default_rng([seed, _OWN, row.line])
            parts.append(fit_to_len(tokenizer, allowed[rng.integers(0, len(allowed), size=left)]
                                    .tolist(), left, rng)[0])
        prompt = "".join(parts)
        out.append(SampleRequest(prompt, len(tokenizer(prompt).input_ids), row.output_len,
                                 arrival_s=(row.time_s - t0) * time_scale))
    return out


def trace_summary(path: str | os.PathLike[str], num_requests: int, *, time_scale: float = 1.0,
                  block_size: int = 512) -> dict[str, Any]:
    """What the replayed part of the trace holds, recorded beside the metrics it produced."""
    trace = read_trace(path)
    rows = trace.rows[:num_requests]
    seen: set[int] = set()
    repeated = total = 0
    for row in rows:
        left = row.input_len
        for key in row.hash_ids:
            n = min(left, block_size)
            if n <= 0:
                break
            if key in seen:
                repeated += n
            seen.add(key)
            left -= block_size
        total += row.input_len
    duration = rows[-1].time_s - rows[0].time_s

    def pct(values: list[int]) -> dict[str, float]:
        return {"mean": float(np.mean(values)),
                **{f"p{p}": float(np.percentile(values, p)) for p in (50, 90, 99)}}

    return {
        "path": os.fspath(path),
        "format": "burstgpt" if os.fspath(path).lower().endswith(".csv") else "mooncake",
        "requests": len(rows),
        "requests_in_file": len(trace.rows),
        "skipped_failed": trace.skipped_failed,
        "duration_s": duration,
        "replay_duration_s": duration * time_scale,
        "time_scale": time_scale,
        "request_rate": (len(rows) - 1) / duration if duration > 0 else None,
        "input_len": pct([r.input_len for r in rows]),
        "output_len": pct([r.output_len for r in rows]),
        "repeated_block_token_share": repeated / total if total else 0.0,
    }
