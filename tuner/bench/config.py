"""What one benchmark run does: the knobs of ``vllm bench serve`` that a tuning study uses.

The settings a space's workload shares with the client take their defaults from
``tuner.space.bench_settings`` (one description for the space, the client and ``tune bench``); the
rest (where to send, what to measure) are the client's own."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from tuner.errors import BenchInputError
from tuner.space.bench_settings import DEFAULTS, SEED_MAX, BenchSettings

ENDPOINTS = {"/v1/completions": "openai", "/v1/chat/completions": "openai-chat"}
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el", "client_queue_time",
                      "e2el_including_client_queue")
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


@dataclass(frozen=True)
class BenchConfig:
    """One run's settings; ``from_settings`` builds it from a workload's shared ones."""

    base_url: str
    model: str
    tokenizer: str
    endpoint: str = "/v1/completions"
    dataset_name: str = DEFAULTS.dataset
    dataset_path: str | None = DEFAULTS.dataset_path
    num_prompts: int = DEFAULTS.num_prompts
    random_input_len: int = DEFAULTS.random_input_len
    random_output_len: int = DEFAULTS.random_output_len
    random_range_ratio: float = DEFAULTS.random_range_ratio
    random_prefix_len: int = DEFAULTS.random_prefix_len
    sharegpt_output_len: int | None = DEFAULTS.sharegpt_output_len
    custom_output_len: int = DEFAULTS.custom_output_len
    skip_chat_template: bool = DEFAULTS.skip_chat_template
    disable_shuffle: bool = DEFAULTS.disable_shuffle
    prefix_repetition_prefix_len: int = DEFAULTS.prefix_repetition_prefix_len
    prefix_repetition_suffix_len: int = DEFAULTS.prefix_repetition_suffix_len
    prefix_repetition_num_prefixes: int = DEFAULTS.prefix_repetition_num_prefixes
    prefix_repetition_output_len: int = DEFAULTS.prefix_repetition_output_len
    multi_turn_turns: int = DEFAULTS.multi_turn_turns
    multi_turn_input_len: int = DEFAULTS.multi_turn_input_len
    multi_turn_output_len: int = DEFAULTS.multi_turn_output_len
    time_scale: float = DEFAULTS.time_scale
    trace_block_size: int = DEFAULTS.trace_block_size
    request_rate: float = DEFAULTS.request_rate
    burstiness: float = DEFAULTS.burstiness
    max_concurrency: int | None = DEFAULTS.max_concurrency
    seed: int = DEFAULTS.seed
    num_warmups: int = DEFAULTS.num_warmups
    ignore_eos: bool = True
    temperature: float = 0.0
    omit_fields: frozenset[str] = frozenset()
    goodput: dict[str, float] | None = None
    percentile_metrics: tuple[str, ...] = ("ttft", "tpot", "itl")
    metric_percentiles: tuple[float, ...] = (99.0,)
    request_timeout_s: float = 6 * 3600
    # Stop the run after this long: requests not finished count as failed, and the duration is
    # the deadline (for servers that would take hours, e.g. one request at a time).
    max_duration_s: float | None = None
    # Bearer token for servers started with --api-key (else OPENAI_API_KEY, as vLLM's client does).
    api_key: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        # Callers build configs from YAML and CLI lists; normalise so equality and hashing hold.
        object.__setattr__(self, "omit_fields", frozenset(self.omit_fields))
        object.__setattr__(self, "percentile_metrics", tuple(self.percentile_metrics))
        object.__setattr__(self, "metric_percentiles", tuple(float(p) for p in self.metric_percentiles))
        if self.goodput is not None:
            object.__setattr__(self, "goodput", {k: float(v) for k, v in self.goodput.items()})

    def __hash__(self) -> int:  # goodput is a dict; hash what identifies the run instead
        return hash((self.base_url, self.model, self.endpoint, self.dataset_name, self.num_prompts,
                     self.seed, self.request_rate, self.max_concurrency))

    @classmethod
    def from_settings(cls, settings: BenchSettings, **client: Any) -> "BenchConfig":
        """The shared settings (a workload, or ``tune bench``'s flags) plus the client's own."""
        shared = settings.model_dump(include=set(BenchSettings.model_fields))
        return cls(dataset_name=shared.pop("dataset"), **shared, **client)

    @property
    def backend(self) -> str:
        """vLLM's name for the request function this endpoint uses."""
        return ENDPOINTS.get(self.endpoint.rstrip("/"), "openai")

    @property
    def is_chat(self) -> bool:
        return self.endpoint.rstrip("/").endswith("chat/completions")

    @property
    def api_url(self) -> str:
        return self.base_url.rstrip("/") + "/" + self.endpoint.lstrip("/")

    def validate(self) -> None:
        """Reject values vLLM would reject, before any request is sent (BenchInputError)."""
        if not self.base_url.startswith(("http://", "https://")):
            raise BenchInputError(f"base_url {self.base_url!r} must start with http:// or https://")
        try:
            url = urlsplit(self.base_url)
            port = url.port
        except ValueError as exc:  # a bad IPv6 literal, or a port that is not a number 0-65535
            raise BenchInputError(f"base_url {self.base_url!r} is not a valid URL: {exc}") from None
        if not url.hostname:
            raise BenchInputError(f"base_url {self.base_url!r} names no host")
        if port == 0:
            raise BenchInputError(f"base_url {self.base_url!r}: the port must be 1-65535")
        if not self.endpoint.rstrip("/").endswith("completions"):
            raise BenchInputError(
                f"endpoint {self.endpoint!r} is not supported; use /v1/completions or "
                "/v1/chat/completions")
        if not self.model:
            raise BenchInputError("model (the served model name) is empty")
        if self.num_prompts < 1:
            raise BenchInputError(f"num_prompts must be at least 1, got {self.num_prompts}")
        if not 0 <= self.seed <= SEED_MAX:
            raise BenchInputError(f"seed must be in [0, {SEED_MAX}], got {self.seed}")
        # An empty prefix or suffix is valid, as in vLLM (whose numpy draw fails on a negative one);
        # a count the requests are divided by, a block size or a max_tokens must be at least 1.
        for name, least in (("prefix_repetition_prefix_len", 0), ("prefix_repetition_suffix_len", 0),
                            ("prefix_repetition_num_prefixes", 1), ("prefix_repetition_output_len", 1),
                            ("multi_turn_turns", 1), ("multi_turn_input_len", 1),
                            ("multi_turn_output_len", 1), ("trace_block_size", 1)):
            if getattr(self, name) < least:
                raise BenchInputError(f"{name} must be at least {least}, got {getattr(self, name)}")
        if not self.request_rate > 0 or math.isnan(self.request_rate):
            raise BenchInputError(f"request_rate must be > 0 (inf sends all at once), got {self.request_rate}")
        if not self.time_scale > 0 or math.isinf(self.time_scale):
            raise BenchInputError(f"time_scale must be a finite number > 0, got {self.time_scale}")
        if not self.burstiness > 0:
            raise BenchInputError(f"burstiness must be > 0, got {self.burstiness}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise BenchInputError(f"max_concurrency must be at least 1, got {self.max_concurrency}")
        if self.num_warmups < 0:
            raise BenchInputError(f"num_warmups must be >= 0, got {self.num_warmups}")
        if not self.request_timeout_s > 0:
            raise BenchInputError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.max_duration_s is not None and not self.max_duration_s > 0:
            raise BenchInputError(f"max_duration_s must be > 0, got {self.max_duration_s}")
        for name in self.percentile_metrics:
            if name not in PERCENTILE_METRICS:
                raise BenchInputError(
                    f"percentile metric {name!r} is unknown; choose from {', '.join(PERCENTILE_METRICS)}")
        for p in self.metric_percentiles:
            if not 0 < p <= 100:
                raise BenchInputError(f"metric percentile {p} is outside (0, 100]")
        for name, value in (self.goodput or {}).items():
            if name not in GOODPUT_METRICS:
                raise BenchInputError(
                    f"goodput metric {name!r} is unknown; choose from {', '.join(GOODPUT_METRICS)}")
            if value < 0:
                raise BenchInputError(f"goodput {name} must be >= 0 ms, got {value}")


def parse_goodput(pairs: list[str]) -> dict[str, float]:
    """``["ttft:500", "tpot:50"]`` (commas also accepted) to ``{"ttft": 500.0, "tpot": 50.0}`` ms."""
    out: dict[str, float] = {}
    for item in (p for pair in pairs for p in re.split(r"[,\s]+", pair) if p):
        name, sep, value = item.partition(":")
        try:
            if not sep:
                raise ValueError
            out[name.strip()] = float(value)
        except ValueError:
            raise BenchInputError(
                f"goodput {item!r} is not KEY:VALUE with a number of milliseconds "
                "(e.g. ttft:500 tpot:50)") from None
    return out
