"""Benchmark prompts built exactly as ``vllm bench serve`` builds them (vLLM 0.33 rules).

Same seed, same tokenizer, same flags give the same prompts as vLLM, so a study's numbers can be
checked against a plain ``vllm bench serve`` run. The random dataset draws from its own
``np.random.default_rng(seed)``; ShareGPT uses Python's global ``random`` as vLLM does (seeded
right before use, so earlier draws elsewhere do not matter).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import os
import random
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tuner.bench.custom import read_custom, sample_custom
from tuner.bench.prompts import SampleRequest, fit_to_len
from tuner.bench.synthetic import sample_multi_turn, sample_prefix_repetition
from tuner.bench.traces import read_trace, sample_trace
from tuner.errors import BenchInputError, InputError
from tuner.files import read_text
from tuner.space.bench_settings import FILE_DATASETS
from tuner.space.model import (
    SHAREGPT_MAX_PROMPT_LEN,
    SHAREGPT_MAX_TOTAL_LEN,
    SHAREGPT_MIN_LEN,
)

if TYPE_CHECKING:
    from tuner.bench.config import BenchConfig

log = logging.getLogger(__name__)





# --------------------------------------------------------------------------- tokenizer

class _DropTorchAdvice(logging.Filter):
    # transformers warns at import that PyTorch is missing; the bench only needs tokenizers.
    def filter(self, record: logging.LogRecord) -> bool:
        return "PyTorch was not found" not in record.getMessage()


logging.getLogger("transformers").addFilter(_DropTorchAdvice())
_tokenizer_lock = threading.Lock()


@contextmanager
def _quiet_transformers() -> Iterator[None]:
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(level)


def load_tokenizer(path: str) -> Any:
    """The HF tokenizer at ``path``, loaded once per process (trials reuse it)."""
    with _tokenizer_lock:
        return _load_tokenizer_cached(str(path))


@functools.lru_cache(maxsize=8)
def _load_tokenizer_cached(path: str) -> Any:
    expanded = os.path.expanduser(path)
    looks_local = os.path.isabs(expanded) or expanded.startswith(".") or os.path.exists(expanded)
    if looks_local and not os.path.isdir(expanded):
        raise BenchInputError(f"tokenizer {path!r}: no such directory")
    try:
        from transformers import AutoTokenizer

        with _quiet_transformers():
            return AutoTokenizer.from_pretrained(expanded, local_files_only=True)
    except BenchInputError:
        raise
    except Exception as exc:  # OSError, ValueError, JSON errors: all mean "not a usable tokenizer"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BenchInputError(f"tokenizer {path!r} could not be loaded: {first}") from exc


# --------------------------------------------------------------------------- entry point

def load_requests(config: BenchConfig, tokenizer: Any = None) -> list[SampleRequest]:
    """The request list the config describes; cached, because every trial of a study asks for the same one."""
    if config.num_prompts < 1:
        raise BenchInputError(f"num_prompts must be at least 1, got {config.num_prompts}")
    key = _cache_key(config)
    if tokenizer is None:
        tokenizer = load_tokenizer(config.tokenizer)
    cached = _request_cache.get(key)
    if cached is not None and cached[0] is tokenizer:
        return list(cached[1])
    with _quiet_transformers():  # long prompts trip "longer than model_max_length"
        requests = _sample(config, tokenizer)
    if len(_request_cache) >= 4:
        _request_cache.pop(next(iter(_request_cache)))
    _request_cache[key] = (tokenizer, tuple(requests))
    return requests


_request_cache: dict[tuple, tuple[Any, tuple[SampleRequest, ...]]] = {}


def check_file(dataset: str, path: str | os.PathLike[str]) -> str | None:
    """Read a custom or trace file through (no tokenizer needed) and say what it holds; a bad line
    raises BenchInputError naming it. Lets a study refuse a broken file before it exists."""
    if dataset == "custom":
        return f"{len(read_custom(path))} prompts"
    if dataset == "trace":
        rows = read_trace(path).rows
        return f"{len(rows)} requests over {rows[-1].time_s - rows[0].time_s:g} s"
    return None  # ShareGPT: read with the tokenizer, when the run starts


def _sample(config: BenchConfig, tokenizer: Any) -> list[SampleRequest]:
    name, path, n = config.dataset_name, config.dataset_path, config.num_prompts
    if name in FILE_DATASETS and not path:
        raise BenchInputError(f"dataset {name!r} needs dataset_path (the file to read)")
    if name not in FILE_DATASETS and path is not None:
        raise BenchInputError(f"dataset {name!r} takes no dataset_path (got {path!r}); the "
                              f"datasets read from a file are {', '.join(FILE_DATASETS)}")
    if name == "random":
        return sample_random(
            tokenizer, n, input_len=config.random_input_len, output_len=config.random_output_len,
            range_ratio=config.random_range_ratio, prefix_len=config.random_prefix_len,
            seed=config.seed)
    if name == "sharegpt":
        return sample_sharegpt(path, tokenizer, n, output_len=config.sharegpt_output_len,
                               seed=config.seed)
    if name == "custom":
        return sample_custom(path, tokenizer, n, output_len=config.custom_output_len,
                             skip_chat_template=config.skip_chat_template,
                             disable_shuffle=config.disable_shuffle, seed=config.seed)
    if name == "prefix_repetition":
        return sample_prefix_repetition(
            tokenizer, n, prefix_len=config.prefix_repetition_prefix_len,
            suffix_len=config.prefix_repetition_suffix_len,
            num_prefixes=config.prefix_repetition_num_prefixes,
            output_len=config.prefix_repetition_output_len, seed=config.seed,
            disable_shuffle=config.disable_shuffle)
    if name == "multi_turn":
        return sample_multi_turn(tokenizer, n, turns=config.multi_turn_turns,
                                 input_len=config.multi_turn_input_len,
                                 output_len=config.multi_turn_output_len, seed=config.seed)
    if name == "trace":
        return sample_trace(path, tokenizer, n, time_scale=config.time_scale,
                            block_size=config.trace_block_size, seed=config.seed)
    raise BenchInputError(
        f"dataset_name {name!r} is not supported; use random, sharegpt, custom, "
        "prefix_repetition, multi_turn or trace")


def _cache_key(config: BenchConfig) -> tuple:
    stamp: Any = None
    if config.dataset_path:
        try:
            st = os.stat(config.dataset_path)
            stamp = (st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = "missing"
    return (config.tokenizer, config.dataset_name, config.dataset_path, stamp, config.num_prompts,
            config.random_input_len, config.random_output_len, config.random_range_ratio,
            config.random_prefix_len, config.sharegpt_output_len, config.custom_output_len,
            config.skip_chat_template, config.disable_shuffle, config.prefix_repetition_prefix_len,
            config.prefix_repetition_suffix_len, config.prefix_repetition_num_prefixes,
            config.prefix_repetition_output_len, config.multi_turn_turns,
            config.multi_turn_input_len, config.multi_turn_output_len, config.time_scale,
            config.trace_block_size, config.seed)


# --------------------------------------------------------------------------- random

def sample_random(
    tokenizer: Any,
    num_requests: int,
    *,
    input_len: int = 1024,
    output_len: int = 128,
    range_ratio: float = 0.0,
    prefix_len: int = 0,
    seed: int = 0,
) -> list[SampleRequest]:
    """vLLM's RandomDataset: token-id runs over the non-special vocabulary, lengths fixed by re-encoding."""
    if not 0.0 <= range_ratio < 1.0:
        raise BenchInputError(f"random_range_ratio must be in [0, 1), got {range_ratio}")
    if input_len < 0 or output_len < 0 or prefix_len < 0:
        raise BenchInputError(
            f"random lengths must be non-negative (input {input_len}, output {output_len}, "
            f"prefix {prefix_len})")
    rng = np.random.default_rng(seed)
    num_special = int(tokenizer.num_special_tokens_to_add())
    real_input_len = max(0, int(input_len) - num_special)
    in_lo = math.floor(real_input_len * (1 - range_ratio))
    in_hi = math.ceil(real_input_len * (1 + range_ratio))
    out_lo = max(math.floor(output_len * (1 - range_ratio)), 1)
    out_hi = max(math.ceil(output_len * (1 + range_ratio)), 1)
    if prefix_len + in_lo < 1:
        raise BenchInputError(
            f"random_input_len {input_len} is too small: with {num_special} special token(s) and "
            f"range ratio {range_ratio} a prompt could have {prefix_len + in_lo} tokens; "
            "raise random_input_len or random_prefix_len")
    # Draw order matters for reproducing vLLM: input lengths, output lengths, offsets, prefix.
    input_lens = rng.integers(in_lo, in_hi + 1, size=num_requests)
    output_lens = rng.integers(out_lo, out_hi + 1, size=num_requests)
    offsets = rng.integers(0, tokenizer.vocab_size, size=num_requests)

    vocab_size = tokenizer.vocab_size
    allowed = np.array(list(set(np.arange(vocab_size)) - set(tokenizer.all_special_ids)))
    prefix: list[int] = []
    if prefix_len > 0:
        prefix_seed = allowed[rng.integers(0, len(allowed), size=prefix_len)].tolist()
        _, prefix, _ = fit_to_len(tokenizer, prefix_seed, prefix_len, rng)

    requests: list[SampleRequest] = []
    mismatch = 0
    for i in range(num_requests):
        n = int(input_lens[i])
        inner = allowed[(int(offsets[i]) + i + np.arange(n)) % len(allowed)].tolist()
        prompt, ids, miss = fit_to_len(tokenizer, prefix + inner, prefix_len + n, rng)
        mismatch += miss
        requests.append(SampleRequest(prompt, len(ids), int(output_lens[i])))
    if mismatch:
        log.info("random dataset: %d token(s) off target after re-encoding (vLLM tolerates this too)",
                 abs(mismatch))
    return requests


# --------------------------------------------------------------------------- ShareGPT

def sample_sharegpt(
    path: str | os.PathLike[str],
    tokenizer: Any,
    num_requests: int,
    *,
    output_len: int | None = None,
    seed: int = 0,
) -> list[SampleRequest]:
    """vLLM's ShareGPTDataset: first two turns as prompt/completion, pruned by length, oversampled."""
    if output_len is not None and output_len < 1:
        raise BenchInputError(f"sharegpt_output_len must be at least 1, got {output_len}")
    data = _read_sharegpt(path)
    random.seed(seed)
    random.shuffle(data)
    samples: list[SampleRequest] = []
    malformed = pruned = 0
    for entry in data:
        if len(samples) >= num_requests:
            break
        turns = entry["conversations"]
        prompt, completion = _turn_text(turns[0]), _turn_text(turns[1])
        if prompt is None or completion is None:
            malformed += 1
            continue
        prompt_len = len(tokenizer(prompt).input_ids)  # with special tokens, as vLLM counts
        new_output_len = len(tokenizer(completion).input_ids) if output_len is None else output_len
        if not _valid_sequence(prompt_len, new_output_len, skip_min_output=output_len is not None):
            pruned += 1
            continue
        samples.append(SampleRequest(prompt, prompt_len, new_output_len))
    if not samples:
        raise BenchInputError(
            f"ShareGPT file {os.fspath(path)!r}: no usable conversation among {len(data)} with two "
            f"or more turns ({pruned} outside vLLM's length limits: prompt {SHAREGPT_MIN_LEN}-"
            f"{SHAREGPT_MAX_PROMPT_LEN} tokens, prompt+output <= {SHAREGPT_MAX_TOTAL_LEN}; "
            f"{malformed} without string 'value' fields)")
    if len(samples) < num_requests:
        random.seed(seed)
        # One random.choice per missing sample, from the kept ones only (vLLM 0.32/0.33 code).
        extra = [random.choice(samples) for _ in range(num_requests - len(samples))]
        samples.extend(extra)
    return samples


def sample_prompts(path: str | os.PathLike[str], tokenizer: Any, n: int, *, seed: int,
                   max_prompt_len: int) -> list[str]:
    """``n`` distinct first turns of a ShareGPT file, ``SHAREGPT_MIN_LEN`` to ``max_prompt_len``
    tokens, drawn with their own ``random.Random(seed)``: the same prompts for every trial of a
    study, whatever else used the global generator (the quality probe's fixed prompt set)."""
    turns = list(dict.fromkeys(t for e in _read_sharegpt(path)
                               if (t := _turn_text(e["conversations"][0]))))
    random.Random(seed).shuffle(turns)
    with _quiet_transformers():
        fit = [t for t in turns
               if SHAREGPT_MIN_LEN <= len(tokenizer(t).input_ids) <= max_prompt_len][:n]
    if len(fit) < n:
        raise BenchInputError(
            f"ShareGPT file {os.fspath(path)!r} has {len(fit)} distinct first turns of "
            f"{SHAREGPT_MIN_LEN}-{max_prompt_len} tokens; {n} asked for")
    return fit


def _read_sharegpt(path: str | os.PathLike[str]) -> list[dict]:
    try:
        text = read_text(Path(path).expanduser(), "ShareGPT file")
    except InputError as exc:
        raise BenchInputError(str(exc)) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BenchInputError(
            f"ShareGPT file {os.fspath(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}") from None
    except RecursionError:
        raise BenchInputError(f"ShareGPT file {os.fspath(path)!r} nests too deeply") from None
    if not isinstance(data, list):
        raise BenchInputError(
            f"ShareGPT file {os.fspath(path)!r} must hold a JSON list of conversations, "
            f"found a JSON {type(data).__name__}")
    return [e for e in data
            if isinstance(e, dict) and isinstance(e.get("conversations"), list)
            and len(e["conversations"]) >= 2]


def _turn_text(turn: Any) -> str | None:
    if isinstance(turn, dict) and isinstance(turn.get("value"), str):
        return turn["value"]
    return None


def _valid_sequence(prompt_len: int, output_len: int, *, skip_min_output: bool) -> bool:
    return not (
        prompt_len < SHAREGPT_MIN_LEN
        or (not skip_min_output and output_len < SHAREGPT_MIN_LEN)
        or prompt_len > SHAREGPT_MAX_PROMPT_LEN
        or prompt_len + output_len > SHAREGPT_MAX_TOTAL_LEN
    )
