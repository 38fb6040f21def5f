"""Generated workloads that exercise a prefix cache: shared prefixes and multi-turn conversations.

``prefix_repetition`` is vLLM's ``PrefixRepetitionRandomDataset`` (``vllm bench serve
--dataset-name prefix_repetition``), prompt for prompt: N prefixes of L tokens, each followed by
``num_requests / N`` different suffixes. ``multi_turn`` has no ``vllm bench serve`` counterpart:
each conversation's turn k resends turns 1..k-1 (user text and a generated stand-in for the
assistant's reply) and is sent only after turn k-1 finished, as a chat client does.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from tuner.bench.prompts import LegacyRandom, SampleRequest, allowed_ids, fit_to_len, random_text
from tuner.errors import BenchInputError


def sample_prefix_repetition(tokenizer: Any, num_requests: int, *, prefix_len: int,
                             suffix_len: int, num_prefixes: int, output_len: int, seed: int,
                             disable_shuffle: bool = False) -> list[SampleRequest]:
    """vLLM's PrefixRepetitionRandomDataset.sample: the same prompts for the same seed."""
    per_prefix = num_requests // num_prefixes
    if per_prefix == 0:
        raise BenchInputError(
            f"prefix_repetition: num_prompts ({num_requests}) must be at least "
            f"prefix_repetition_num_prefixes ({num_prefixes})")
    rng = LegacyRandom(seed)
    vocab = tokenizer.vocab_size

    def exact(n: int) -> list[int]:
        _, ids, _ = fit_to_len(tokenizer, rng.integers(0, vocab, n).tolist(), n, rng)
        return ids

    requests = []
    for _ in range(num_prefixes):
        prefix = exact(prefix_len)
        for _ in range(per_prefix):
            ids = prefix + exact(suffix_len)
            requests.append(SampleRequest(tokenizer.decode(ids), len(ids), output_len))
    if not disable_shuffle:
        random.Random(seed).shuffle(requests)
    return requests


def sample_multi_turn(tokenizer: Any, num_requests: int, *, turns: int, input_len: int,
                      output_len: int, seed: int) -> list[SampleRequest]:
    """``num_requests // turns`` conversations of ``turns`` requests, in turn order (all first
    turns, then all second turns...), each later turn marked to wait for the one before."""
    conversations = num_requests // turns
    if conversations == 0:
        raise BenchInputError(f"multi_turn: num_prompts ({num_requests}) must be at least "
                              f"multi_turn_turns ({turns})")
    rng = np.random.default_rng(seed)
    allowed = allowed_ids(tokenizer)
    history = [""] * conversations
    requests = []
    for k in range(turns):
        for c in range(conversations):
            prompt = history[c] + random_text(tokenizer, input_len, rng, allowed)
            prompt_len = len(tokenizer(prompt).input_ids)
            after = (k - 1) * conversations + c if k else -1
            requests.append(SampleRequest(prompt, prompt_len, output_len, after=after))
            # The reply stands in for the server's answer, so the prompts do not depend on it
            # and every run sends the same bytes.
            history[c] = prompt + random_text(tokenizer, output_len, rng, allowed)
    return requests
