"""Throughput per GPU: a launch over two GPUs must serve twice the tokens of a one-GPU launch to be
worth as much, so configs with different tensor_parallel x data_parallel compare on one scale."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GPUS = "gpus"
TOKENS_PER_GPU_HOUR = "total_tokens_per_gpu_hour"


def per_gpu(metrics: Mapping[str, Any], gpus: int) -> dict[str, float | int]:
    """The GPUs the launch took and its prompt + output tokens per GPU-hour (total tok/s x 3600 /
    GPUs): the cost view of throughput, ranking configs as tok/s per GPU does. Without a measured
    throughput there is no rate to normalise."""
    if gpus < 1:
        raise ValueError(f"a launch takes at least one GPU, not {gpus}")
    out: dict[str, float | int] = {GPUS: gpus}
    throughput = metrics.get("total_token_throughput")
    if throughput is not None:
        out[TOKENS_PER_GPU_HOUR] = float(throughput) * 3600.0 / gpus
    return out
