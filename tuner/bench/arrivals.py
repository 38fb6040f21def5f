"""When each request is sent: vLLM's ``get_request`` arrival process, reproducible by seed.

vLLM seeds numpy's global RNG (``np.random.seed(seed)``) at start-up and draws the gaps from it.
We draw from a private ``RandomState(seed)``, which yields the identical sequence without touching
the global state other code in the tuner process may rely on.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def arrival_offsets(num_requests: int, request_rate: float, burstiness: float = 1.0,
                    seed: int = 0) -> list[float]:
    """Send time of each request in seconds after the start, as vLLM computes it.

    Gamma-distributed gaps (Poisson for burstiness 1), accumulated, then rescaled so the last request
    goes out at exactly ``num_requests / request_rate``. Infinite rate means all at t=0.
    """
    if num_requests <= 0:
        return []
    if request_rate == math.inf:
        return [0.0] * num_requests
    if burstiness == math.inf:
        delays = [1.0 / request_rate] * num_requests
    else:
        rng = np.random.RandomState(seed)
        theta = 1.0 / (request_rate * burstiness)
        delays = [float(rng.gamma(shape=burstiness, scale=theta)) for _ in range(num_requests)]
    for i in range(1, num_requests):  # sequential sum, bit-identical to vLLM's loop
        delays[i] += delays[i - 1]
    if delays[-1] != 0:
        factor = (num_requests / request_rate) / delays[-1]
        delays = [d * factor for d in delays]
    return delays


async def paced(items: Sequence[T], offsets: Sequence[float]) -> AsyncIterator[tuple[int, T]]:
    """Yield ``(index, item)`` at ``offsets[index]`` seconds after the first iteration."""
    start = time.perf_counter()
    for i, item in enumerate(items):
        offset = offsets[i]
        # A loop, not one sleep: uvloop's clock is cached per iteration, so a sleep can end up to a
        # millisecond early against perf_counter, and no request may go out before its slot.
        while (wait := start + offset - time.perf_counter()) > 0:
            await asyncio.sleep(wait)
        yield i, item


def concurrency_limit(max_concurrency: int | None) -> Any:
    """vLLM's ``--max-concurrency``: a semaphore around each request, or no limit at all."""
    return asyncio.Semaphore(max_concurrency) if max_concurrency else contextlib.nullcontext()
