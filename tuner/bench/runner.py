"""A whole benchmark run: prompts, warm-ups, the paced timed run, metrics, client self-check.

The client measures its own CPU use during the timed run. On a small machine the benchmark client
competes with the engine for cores; a client near 100% of a core is the bottleneck, and the trial's
numbers then describe the client rather than the engine (``client_saturated`` flags that).
"""

from __future__ import annotations

import asyncio
import gc
import math
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from tuner.bench.arrivals import arrival_offsets, concurrency_limit, paced
from tuner.bench.config import BenchConfig
from tuner.bench.datasets import SampleRequest, load_requests, load_tokenizer
from tuner.bench.metrics import calculate_metrics
from tuner.bench.request import RequestOutput, make_client, send_request
from tuner.bench.summary import format_summary
from tuner.bench.traces import trace_summary
from tuner.errors import BenchInputError

SATURATION_PERCENT = 90.0
_CUT = "not finished within max_duration_s"

ProgressCallback = Callable[[int, int], None]


@dataclass
class BenchResult:
    config: BenchConfig
    metrics: dict[str, Any]
    errors: list[str]
    client_cpu_percent: float
    client_saturated: bool
    date: str
    outputs: list[RequestOutput] = field(default_factory=list, repr=False)
    output_lens: list[int] = field(default_factory=list, repr=False)
    # What a replayed trace holds (requests, duration, lengths, shared blocks); None otherwise.
    workload_summary: dict[str, Any] | None = None

    def summary(self) -> str:
        """The block ``vllm bench serve`` prints."""
        return format_summary(
            self.metrics, max_concurrency=self.config.max_concurrency,
            request_rate=self.config.request_rate,
            percentile_metrics=self.config.percentile_metrics,
            percentiles=self.config.metric_percentiles)

    def to_json(self) -> dict[str, Any]:
        """vLLM's ``--save-result`` document, plus the tuner's own findings under ``"tuner"``."""
        c = self.config
        doc: dict[str, Any] = {
            "date": self.date,
            "endpoint_type": c.backend,
            "backend": c.backend,
            "label": None,
            "model_id": c.model,
            "tokenizer_id": c.tokenizer,
            "num_prompts": len(self.outputs) or c.num_prompts,
            "request_rate": "inf" if c.request_rate == math.inf else c.request_rate,
            "burstiness": c.burstiness,
            "max_concurrency": c.max_concurrency,
        }
        for key, value in self.metrics.items():
            doc[key] = value
            if key == "total_token_throughput":  # vLLM keeps these two lists even without --save-detailed
                doc["latencies"] = [o.latency for o in self.outputs]
                doc["queue_times"] = [o.client_queue_time for o in self.outputs]
            elif key == "max_concurrent_requests":
                doc["rtfx"] = 0.0
        doc["tuner"] = {
            "client_cpu_percent": self.client_cpu_percent,
            "client_saturated": self.client_saturated,
            "errors": list(self.errors),
            "base_url": c.base_url,
            "endpoint": c.endpoint,
            "dataset_name": c.dataset_name,
            "dataset_path": c.dataset_path,
            "seed": c.seed,
            "omit_fields": sorted(c.omit_fields),
        }
        if self.workload_summary is not None:
            doc["tuner"]["workload_summary"] = self.workload_summary
        return doc


def run_benchmark(
    config: BenchConfig,
    *,
    on_progress: ProgressCallback | None = None,
    input_requests: Sequence[SampleRequest] | None = None,
) -> BenchResult:
    """Run one benchmark to completion (blocking). Ctrl-C cancels every request and re-raises."""
    with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
        return runner.run(run_benchmark_async(config, on_progress=on_progress,
                                              input_requests=input_requests))


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop where it exists: it costs the client less CPU per read than asyncio's own loop
    (docs/benchmark-client.md, client capacity); None means asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


async def run_benchmark_async(
    config: BenchConfig,
    *,
    on_progress: ProgressCallback | None = None,
    input_requests: Sequence[SampleRequest] | None = None,
) -> BenchResult:
    """``run_benchmark`` for callers that already run an event loop."""
    config.validate()
    tokenizer = load_tokenizer(config.tokenizer)
    if input_requests is None:
        requests = load_requests(config, tokenizer)
    else:
        requests = list(input_requests)
        if not requests:
            raise BenchInputError("input_requests is empty")

    async with make_client(config) as client:
        if config.num_warmups > 0:
            await _warm_up(client, config, requests[0])
        outputs, duration, cpu = await _timed_run(client, config, requests, on_progress)

    def count_tokens(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False).input_ids)

    metrics, output_lens = calculate_metrics(
        outputs, duration, count_tokens=count_tokens,
        percentile_metrics=config.percentile_metrics, percentiles=config.metric_percentiles,
        goodput=config.goodput, max_concurrency=config.max_concurrency,
        request_rate=config.request_rate)
    cpu_percent = cpu / duration * 100.0 if duration > 0 else 0.0
    return BenchResult(
        config=config,
        metrics=metrics,
        errors=summarize_errors(outputs),
        client_cpu_percent=cpu_percent,
        client_saturated=cpu_percent >= SATURATION_PERCENT,
        date=datetime.now().strftime("%Y%m%d-%H%M%S"),
        outputs=outputs,
        output_lens=output_lens,
        workload_summary=(trace_summary(config.dataset_path, len(requests),
                                        time_scale=config.time_scale,
                                        block_size=config.trace_block_size)
                          if config.dataset_name == "trace" else None),
    )


def request_offsets(config: BenchConfig, requests: Sequence[SampleRequest]) -> list[float]:
    """Send times: a trace's own, else vLLM's arrival process at the configured rate."""
    if requests and requests[0].arrival_s is not None:
        return [r.arrival_s or 0.0 for r in requests]
    return arrival_offsets(len(requests), config.request_rate, config.burstiness, config.seed)


def summarize_errors(outputs: Sequence[RequestOutput]) -> list[str]:
    """Distinct failure reasons, most frequent first, with a count when a reason repeats."""
    counts = Counter(o.error or "unknown error" for o in outputs if not o.success)
    return [reason if n == 1 else f"{reason} (x{n})" for reason, n in counts.most_common()]


async def _warm_up(client: Any, config: BenchConfig, first: SampleRequest) -> None:
    # vLLM warms up with copies of the first prompt, under the same concurrency limit.
    limit = concurrency_limit(config.max_concurrency)

    async def one() -> None:
        async with limit:
            await send_request(client, config, first)

    await _gather_or_cancel([asyncio.create_task(one()) for _ in range(config.num_warmups)])


async def _timed_run(
    client: Any,
    config: BenchConfig,
    requests: Sequence[SampleRequest],
    on_progress: ProgressCallback | None,
) -> tuple[list[RequestOutput], float, float]:
    total = len(requests)
    offsets = request_offsets(config, requests)
    limit = concurrency_limit(config.max_concurrency)
    prefix = f"bench-{uuid.uuid4().hex[:8]}-"
    finished = 0
    # A conversation's turn waits for the turn before it (multi_turn); None when none waits.
    done = [asyncio.Event() for _ in requests] if any(r.after >= 0 for r in requests) else None

    deadline = None

    async def one(index: int, request: SampleRequest, arrival: float) -> RequestOutput:
        nonlocal finished
        try:
            async with asyncio.timeout_at(deadline):
                if done is not None and request.after >= 0:
                    await done[request.after].wait()
                    arrival = max(arrival, time.perf_counter())
                async with limit:
                    out = await send_request(client, config, request, prefix + str(index))
        except TimeoutError:
            out = RequestOutput(prompt_len=request.prompt_len, start_time=arrival,
                                error=f"{_CUT}={config.max_duration_s}")
        out.client_queue_time = out.start_time - arrival
        if done is not None:
            done[index].set()
        finished += 1
        if on_progress is not None:
            on_progress(finished, total)
        return out

    # Less collector work during the run: the prompts and tokenizer are long-lived (vLLM does this too).
    gc.collect()
    gc.freeze()
    tasks: list[asyncio.Task[RequestOutput]] = []
    try:
        cpu_start = time.process_time()
        start = time.perf_counter()
        if config.max_duration_s is not None:
            deadline = asyncio.get_running_loop().time() + config.max_duration_s
        async for index, request in paced(requests, offsets):
            tasks.append(asyncio.create_task(one(index, request, time.perf_counter())))
        outputs = await _gather_or_cancel(tasks)
        duration = time.perf_counter() - start
        if config.max_duration_s is not None and any(o.error.startswith(_CUT) for o in outputs):
            # A run cut by the deadline lasted the deadline. The loop's clock may fire up to a
            # millisecond early against perf_counter (uvloop's clock is cached per iteration).
            duration = max(duration, config.max_duration_s)
        cpu = time.process_time() - cpu_start
    except BaseException:
        await _cancel(tasks)
        raise
    finally:
        gc.unfreeze()
    return outputs, duration, cpu


async def _gather_or_cancel(tasks: list[asyncio.Task[Any]]) -> list[Any]:
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        await _cancel(tasks)
        raise


async def _cancel(tasks: list[asyncio.Task[Any]]) -> None:
    pending = [t for t in tasks if not t.done()]
    for t in pending:
        t.cancel()
    if pending:
        # Shielded from a second cancel so the connections are closed before we re-raise.
        await asyncio.shield(asyncio.gather(*pending, return_exceptions=True))
