"""The benchmark settings, described once: each one's name, default, bounds, help and the
``vllm bench serve`` flag it mirrors.

A space's workload (``Workload`` extends this model), the benchmark client's ``BenchConfig`` (its
defaults are read from here) and ``tune bench``'s options (defaults and help from here, checked
against it by ``tests/unit/bench/test_settings.py``) all take their values from this one model, so a
default cannot drift between the space, the client and the command line. It lives in ``tuner.space``
because the space is the lowest layer of the three.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def _setting(default: Any, flag: str, help: str, **bounds: Any) -> Any:  # noqa: A002 - click's word
    return Field(default, description=help, json_schema_extra={"flag": flag}, **bounds)


# numpy seeds the samples and the arrival times, as in vLLM, and takes only 0 .. 2**32 - 1.
SEED_MAX = 2**32 - 1

# The datasets read from ``dataset_path``; the others are generated.
FILE_DATASETS = ("sharegpt", "custom", "trace")


class BenchSettings(BaseModel):
    """What one benchmark run sends: the dataset, how many requests, their shape and their pacing."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    dataset: Literal["random", "sharegpt", "custom", "prefix_repetition", "multi_turn", "trace"] = \
        _setting("random", "--dataset-name",
                 "random, sharegpt, custom, prefix_repetition, multi_turn or trace.")
    dataset_path: str | None = _setting(
        None, "--dataset-path",
        "ShareGPT JSON, custom JSONL, or trace file (Mooncake JSONL, BurstGPT CSV).")
    num_prompts: int = _setting(1000, "--num-prompts", "Requests to send.", gt=0)
    random_input_len: int = _setting(1024, "--random-input-len", "Prompt tokens (random dataset).", gt=0)
    random_output_len: int = _setting(128, "--random-output-len", "Output tokens (random dataset).", gt=0)
    random_range_ratio: float = _setting(0.0, "--random-range-ratio",
                                         "Lengths vary uniformly by this fraction around the lens.", ge=0, lt=1)
    random_prefix_len: int = _setting(0, "--random-prefix-len", "Shared prefix tokens before each prompt.", ge=0)
    sharegpt_output_len: int | None = _setting(None, "--sharegpt-output-len",
                                               "Output tokens for every ShareGPT request (default: the conversation's).")
    custom_output_len: int = _setting(
        256, "--custom-output-len",
        "Output tokens per custom prompt; -1: each line's output_tokens.", ge=-1)
    skip_chat_template: bool = _setting(False, "--skip-chat-template",
                                        "Send custom prompts without the model's chat template.")
    disable_shuffle: bool = _setting(False, "--disable-shuffle",
                                     "Keep the custom file's / prefix_repetition's order.")
    # An empty prefix or suffix is valid, as in vLLM's PrefixRepetitionRandomDataset.
    prefix_repetition_prefix_len: int = _setting(256, "--prefix-repetition-prefix-len",
                                                 "Tokens of each shared prefix.", ge=0)
    prefix_repetition_suffix_len: int = _setting(256, "--prefix-repetition-suffix-len",
                                                 "Tokens after the shared prefix, per request.", ge=0)
    prefix_repetition_num_prefixes: int = _setting(10, "--prefix-repetition-num-prefixes",
                                                   "Distinct shared prefixes.", gt=0)
    prefix_repetition_output_len: int = _setting(128, "--prefix-repetition-output-len",
                                                 "Output tokens (prefix_repetition).", gt=0)
    multi_turn_turns: int = _setting(4, "--multi-turn-turns",
                                     "Turns per conversation; num_prompts / turns conversations.", gt=0)
    multi_turn_input_len: int = _setting(64, "--multi-turn-input-len",
                                         "New user tokens per turn (multi_turn).", gt=0)
    multi_turn_output_len: int = _setting(32, "--multi-turn-output-len",
                                          "Output tokens per turn (multi_turn).", gt=0)
    time_scale: float = _setting(1.0, "--time-scale",
                                 "Trace times are multiplied by this: 0.5 replays twice as fast.", gt=0)
    trace_block_size: int = _setting(512, "--trace-block-size",
                                     "Tokens per hash_ids block of a Mooncake trace.", gt=0)
    request_rate: float = _setting(math.inf, "--request-rate", "Requests/s; inf sends all at once.", gt=0)
    burstiness: float = _setting(1.0, "--burstiness", "Gamma shape of arrival gaps; 1 = Poisson.", gt=0)
    max_concurrency: int | None = _setting(None, "--max-concurrency", "Requests in flight at most.", gt=0)
    seed: int = _setting(0, "--seed", "Seed of the dataset sample and the arrival times.",
                         ge=0, le=SEED_MAX)
    num_warmups: int = _setting(0, "--num-warmups", "Requests sent before the measured run.", ge=0)


DEFAULTS = BenchSettings()


def flag(name: str) -> str:
    """The ``vllm bench serve`` flag of a setting."""
    return BenchSettings.model_fields[name].json_schema_extra["flag"]  # type: ignore[index]


def help_of(name: str) -> str:
    return BenchSettings.model_fields[name].description or ""
