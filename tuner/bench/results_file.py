"""Where `tune bench` saves a result: the file name vLLM's client would pick."""

from __future__ import annotations

from tuner.bench.runner import BenchResult


def default_result_filename(result: BenchResult) -> str:
    """vLLM's name: ``{backend}-{rate}qps[-concurrency{C}]-{model}-{date}.json``."""
    c = result.config
    conc = f"-concurrency{c.max_concurrency}" if c.max_concurrency is not None else ""
    return f"{c.backend}-{c.request_rate}qps{conc}-{c.model.split('/')[-1]}-{result.date}.json"

