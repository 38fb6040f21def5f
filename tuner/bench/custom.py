"""Your own prompts: vLLM's custom JSONL and AIPerf's per-request JSONL, one reader for both.

vLLM's form (``vllm bench serve --dataset-name custom``, vllm/benchmarks/datasets.py
``CustomDataset``) has a ``prompt`` per line, optionally ``output_tokens``; the prompt is wrapped in
the model's chat template unless ``skip_chat_template``. AIPerf's form (its ``mooncake_trace``
custom dataset type) has ``text_input`` or ``input_length`` (a prompt of that many generated
tokens) and optionally ``output_length``; its text is sent as written, as AIPerf does. Sampling is
vLLM's for both: shuffled by ``random.seed(seed)`` unless ``disable_shuffle``, the first
``num_prompts`` lines, then oversampled with ``random.choice`` when the file is shorter.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

import numpy as np

from tuner.bench.prompts import SampleRequest, allowed_ids, random_text
from tuner.bench.rows import field, jsonl_rows
from tuner.errors import BenchInputError

WHAT = "custom dataset"


@dataclass(frozen=True)
class CustomRow:
    where: str                # "FILE line N", for errors found after reading
    text: str | None          # None: generate input_length tokens
    input_length: int | None
    output_len: int | None    # the line's own output length, when it gives one
    templated: bool           # vLLM's form: the chat template applies
    line: int


def read_custom(path: str | os.PathLike[str]) -> list[CustomRow]:
    """Every line checked before any is used: a bad line fails the whole file."""
    rows = []
    for lineno, row in jsonl_rows(path, WHAT):
        where = f"{WHAT} {os.fspath(path)} line {lineno}"
        if "prompt" in row:
            rows.append(CustomRow(where, field(row, "prompt", where, kind="str"), None,
                                  field(row, "output_tokens", where, required=False), True, lineno))
        elif "text_input" in row or "input_length" in row:
            text = field(row, "text_input", where, kind="str", required=False)
            length = None if text is not None else field(row, "input_length", where)
            rows.append(CustomRow(where, text, length,
                                  field(row, "output_length", where, required=False), False, lineno))
        else:
            raise BenchInputError(f"{where}: missing field 'prompt' (vLLM's form) or "
                                  "'text_input' / 'input_length' (AIPerf's form)")
    if not rows:
        raise BenchInputError(f"{WHAT} {os.fspath(path)}: no prompts (every line is blank)")
    return rows


def sample_custom(path: str | os.PathLike[str], tokenizer: Any, num_requests: int, *,
                  output_len: int, skip_chat_template: bool = False,
                  disable_shuffle: bool = False, seed: int = 0) -> list[SampleRequest]:
    """The requests ``vllm bench serve --dataset-name custom`` sends for the same file and flags;
    ``output_len`` -1 means each line's own, as ``--custom-output-len -1``."""
    if output_len == 0 or output_len < -1:
        raise BenchInputError(f"custom_output_len must be at least 1, or -1 for each line's "
                              f"output_tokens; got {output_len}")
    rows = read_custom(path)
    for row in rows:
        if _output_len(row, output_len) is None:
            raise BenchInputError(f"{row.where}: no output length: give 'output_tokens' / "
                                  "'output_length', or set custom_output_len above 0")
    if not disable_shuffle:
        random.Random(seed).shuffle(rows)
    allowed = None
    samples = []
    for row in rows[:num_requests]:
        text = row.text
        if text is None:
            allowed = allowed_ids(tokenizer) if allowed is None else allowed
            # Seeded by line, so a line's prompt does not depend on the shuffle or the count.
            text = random_text(tokenizer, row.input_length or 1,
                               np.random.default_rng([seed, row.line]), allowed)
        if row.templated and not skip_chat_template:
            text = _chat_template(tokenizer, text, row.where)
        samples.append(SampleRequest(text, len(tokenizer(text).input_ids),
                                     int(_output_len(row, output_len))))
    if len(samples) < num_requests:
        pick = random.Random(seed)
        samples += [pick.choice(samples) for _ in range(num_requests - len(samples))]
    return samples


def _output_len(row: CustomRow, setting: int) -> int | None:
    # vLLM reads a line's output_tokens only under --custom-output-len -1; AIPerf's output_length
    # is the line's own and wins.
    own = None if setting == -1 else setting
    if row.templated:
        return own if own is not None else row.output_len
    return row.output_len if row.output_len is not None else own


def _chat_template(tokenizer: Any, prompt: str, where: str) -> str:
    try:
        return tokenizer.apply_chat_template([{"role": "user", "content": prompt}],
                                             add_generation_prompt=True, tokenize=False)
    except ValueError as exc:  # transformers: the tokenizer has no chat template
        raise BenchInputError(f"{where}: the tokenizer cannot apply a chat template ({exc}); "
                              "set skip_chat_template to send the prompts as written") from None
