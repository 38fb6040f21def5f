"""Benchmark client for OpenAI-compatible LLM servers, measuring what ``vllm bench serve`` measures.

The tuner's objective values come from here, so the rules (datasets, arrival process, chunk timing,
metric formulas, result JSON) follow vLLM 0.33's ``vllm bench serve``: numbers from a study can be
reproduced with that tool. The client also reports its own CPU use, since a saturated client
measures itself rather than the engine.
"""

from tuner.bench.config import BenchConfig
from tuner.bench.datasets import SampleRequest, load_requests, load_tokenizer
from tuner.bench.runner import BenchResult, run_benchmark, run_benchmark_async
from tuner.errors import BenchInputError

__all__ = [
    "BenchConfig",
    "BenchInputError",
    "BenchResult",
    "SampleRequest",
    "load_requests",
    "load_tokenizer",
    "run_benchmark",
    "run_benchmark_async",
]
