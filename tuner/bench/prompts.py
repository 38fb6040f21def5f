"""What every dataset makes: the request record, and token-exact synthetic text.

The text helpers follow vLLM's benchmark datasets (``gen_prompt_decode_to_target_len`` and the
draws around it), so generated prompts match ``vllm bench serve``'s for the same seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_FIX_LEN_RETRIES = 10


@dataclass(frozen=True)
class SampleRequest:
    prompt: str
    prompt_len: int
    expected_output_len: int
    # Seconds after the run's start when a trace sent it (None: the arrival process decides).
    arrival_s: float | None = None
    # Index of the request that must finish before this one is sent (a conversation's turn before).
    after: int = -1


def fit_to_len(tokenizer: Any, seq: list[int], target: int,
               rng: Any) -> tuple[str, list[int], int]:
    """vLLM's gen_prompt_decode_to_target_len: decode/encode until the round trip has ``target`` ids."""
    tries = _FIX_LEN_RETRIES
    while True:
        prompt = tokenizer.decode(seq)
        seq = tokenizer.encode(prompt, add_special_tokens=False)
        if tries <= 0:
            return prompt, seq, len(seq) - target
        if len(seq) == target:
            return prompt, seq, 0
        if len(seq) < target:
            # Padding draws from the FULL vocabulary, special ids included: vLLM does the same.
            seq.extend(rng.integers(0, tokenizer.vocab_size, size=target - len(seq)).tolist())
        else:
            seq = seq[:target]
        tries -= 1


class LegacyRandom:
    """numpy's ``RandomState`` under ``Generator``'s method name: the draws vLLM makes from
    ``np.random`` after ``np.random.seed(seed)``, without touching numpy's global state."""

    def __init__(self, seed: int) -> None:
        self._state = np.random.RandomState(seed)

    def integers(self, low: int, high: int, size: int) -> np.ndarray:
        return self._state.randint(low, high, size=size)


def allowed_ids(tokenizer: Any) -> np.ndarray:
    """The vocabulary without special tokens: text drawn from it re-encodes to ordinary tokens."""
    return np.setdiff1d(np.arange(tokenizer.vocab_size), np.array(tokenizer.all_special_ids))


def random_text(tokenizer: Any, n: int, rng: np.random.Generator, allowed: np.ndarray) -> str:
    """Text of ``n`` tokens (after re-encoding, as far as vLLM's retry rule gets) from ``rng``."""
    ids = allowed[rng.integers(0, len(allowed), size=n)].tolist()
    text, _, _ = fit_to_len(tokenizer, ids, n, rng)
    return text
