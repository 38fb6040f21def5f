"""``tune bench``: one benchmark run from the command line, with ``vllm bench serve``'s flag names.

The options a space's workload shares take their default and help from ``tuner.space.bench_settings``;
``tests/unit/bench/test_settings.py`` checks each one's flag against the vLLM name recorded there.

Flags, summary block and result file match vLLM's so the command can stand in for
``vllm bench serve`` in existing scripts (and be checked against it). Differences are deliberate:
inputs and reachability are checked before any prompt is sent (exit 2), a run where every request
failed exits 1 instead of 0, and the result file is written atomically.
"""

import asyncio
import json
import os
import re
import sys
from pathlib import Path
from typing import Annotated, NoReturn

import typer

from tuner.bench.config import BenchConfig, parse_goodput
from tuner.bench.datasets import load_requests, load_tokenizer
from tuner.bench.request import make_client, probe
from tuner.bench.results_file import default_result_filename
from tuner.bench.runner import BenchResult, run_benchmark
from tuner.errors import BenchInputError
from tuner.files import write_atomic
from tuner.space.bench_settings import DEFAULTS, help_of

EXIT_INPUT = 2
CLIENT = BenchConfig(base_url="", model="", tokenizer="")  # the client's own defaults
EXIT_RUNTIME = 1
_GOODPUT_WORD = re.compile(r"^[a-z0-9_]+:[^:]+$")


def register(app: typer.Typer) -> None:
    """Add the ``bench`` command to the tuner's CLI."""
    app.command(
        "bench",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": False},
        help="Benchmark an OpenAI-compatible server the way `vllm bench serve` does.",
    )(bench)


def bench(
    ctx: typer.Context,
    model: Annotated[str, typer.Option(help="Model name sent in requests (and tokenizer, unless --tokenizer).")],
    base_url: Annotated[str | None, typer.Option(help="Server base URL, e.g. http://127.0.0.1:8000 (overrides --host/--port).")] = None,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535)] = 8000,
    endpoint: Annotated[str, typer.Option(help="/v1/completions or /v1/chat/completions.")] = CLIENT.endpoint,
    served_model_name: Annotated[str | None, typer.Option(help="Name sent as 'model' when it differs from --model.")] = None,
    tokenizer: Annotated[str | None, typer.Option(help="Local tokenizer directory (default: --model).")] = None,
    dataset_name: Annotated[str, typer.Option(help=help_of("dataset"))] = DEFAULTS.dataset,
    dataset_path: Annotated[str | None, typer.Option(help=help_of("dataset_path"))] = DEFAULTS.dataset_path,
    num_prompts: Annotated[int, typer.Option(help=help_of("num_prompts"))] = DEFAULTS.num_prompts,
    random_input_len: Annotated[int, typer.Option(help=help_of("random_input_len"))] = DEFAULTS.random_input_len,
    random_output_len: Annotated[int, typer.Option(help=help_of("random_output_len"))] = DEFAULTS.random_output_len,
    random_range_ratio: Annotated[float, typer.Option(help=help_of("random_range_ratio"))] = DEFAULTS.random_range_ratio,
    random_prefix_len: Annotated[int, typer.Option(help=help_of("random_prefix_len"))] = DEFAULTS.random_prefix_len,
    sharegpt_output_len: Annotated[int | None, typer.Option(help=help_of("sharegpt_output_len"))] = DEFAULTS.sharegpt_output_len,
    custom_output_len: Annotated[int, typer.Option(help=help_of("custom_output_len"))] = DEFAULTS.custom_output_len,
    skip_chat_template: Annotated[bool, typer.Option("--skip-chat-template", help=help_of("skip_chat_template"))] = DEFAULTS.skip_chat_template,
    disable_shuffle: Annotated[bool, typer.Option("--disable-shuffle", help=help_of("disable_shuffle"))] = DEFAULTS.disable_shuffle,
    prefix_repetition_prefix_len: Annotated[int, typer.Option(help=help_of("prefix_repetition_prefix_len"))] = DEFAULTS.prefix_repetition_prefix_len,
    prefix_repetition_suffix_len: Annotated[int, typer.Option(help=help_of("prefix_repetition_suffix_len"))] = DEFAULTS.prefix_repetition_suffix_len,
    prefix_repetition_num_prefixes: Annotated[int, typer.Option(help=help_of("prefix_repetition_num_prefixes"))] = DEFAULTS.prefix_repetition_num_prefixes,
    prefix_repetition_output_len: Annotated[int, typer.Option(help=help_of("prefix_repetition_output_len"))] = DEFAULTS.prefix_repetition_output_len,
    multi_turn_turns: Annotated[int, typer.Option(help=help_of("multi_turn_turns"))] = DEFAULTS.multi_turn_turns,
    multi_turn_input_len: Annotated[int, typer.Option(help=help_of("multi_turn_input_len"))] = DEFAULTS.multi_turn_input_len,
    multi_turn_output_len: Annotated[int, typer.Option(help=help_of("multi_turn_output_len"))] = DEFAULTS.multi_turn_output_len,
    time_scale: Annotated[float, typer.Option(help=help_of("time_scale"))] = DEFAULTS.time_scale,
    trace_block_size: Annotated[int, typer.Option(help=help_of("trace_block_size"))] = DEFAULTS.trace_block_size,
    request_rate: Annotated[float, typer.Option(help=help_of("request_rate"))] = DEFAULTS.request_rate,
    burstiness: Annotated[float, typer.Option(help=help_of("burstiness"))] = DEFAULTS.burstiness,
    max_concurrency: Annotated[int | None, typer.Option(help=help_of("max_concurrency"))] = DEFAULTS.max_concurrency,
    goodput: Annotated[list[str] | None, typer.Option(help="SLOs as KEY:MS (ttft, tpot, e2el); several may follow one flag, as in vLLM.")] = None,
    percentile_metrics: Annotated[str, typer.Option(help="Comma list of ttft,tpot,itl,e2el.")] = ",".join(CLIENT.percentile_metrics),
    metric_percentiles: Annotated[str, typer.Option(help="Comma list, e.g. 50,90,99.")] = ",".join(f"{p:g}" for p in CLIENT.metric_percentiles),
    seed: Annotated[int, typer.Option(help=help_of("seed"))] = DEFAULTS.seed,
    num_warmups: Annotated[int, typer.Option(help=help_of("num_warmups"))] = DEFAULTS.num_warmups,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos/--no-ignore-eos")] = CLIENT.ignore_eos,
    temperature: Annotated[float, typer.Option()] = CLIENT.temperature,
    omit_field: Annotated[list[str] | None, typer.Option(help="Request field to leave out (repeatable), e.g. ignore_eos for transformers serve.")] = None,
    request_timeout: Annotated[float, typer.Option(help="Seconds per request.")] = CLIENT.request_timeout_s,
    save_result: Annotated[bool, typer.Option("--save-result")] = False,
    result_dir: Annotated[str | None, typer.Option()] = None,
    result_filename: Annotated[str | None, typer.Option()] = None,
    disable_tqdm: Annotated[bool, typer.Option("--disable-tqdm", help="No progress bar.")] = False,
) -> None:
    try:
        goodput_pairs = list(goodput or []) + _goodput_tail(ctx.args)
        config = BenchConfig(
            base_url=base_url or _join_host_port(host, port),
            model=served_model_name or model,
            tokenizer=tokenizer or model,
            endpoint=endpoint,
            dataset_name=dataset_name,
            dataset_path=dataset_path,
            num_prompts=num_prompts,
            random_input_len=random_input_len,
            random_output_len=random_output_len,
            random_range_ratio=random_range_ratio,
            random_prefix_len=random_prefix_len,
            sharegpt_output_len=sharegpt_output_len,
            custom_output_len=custom_output_len,
            skip_chat_template=skip_chat_template,
            disable_shuffle=disable_shuffle,
            prefix_repetition_prefix_len=prefix_repetition_prefix_len,
            prefix_repetition_suffix_len=prefix_repetition_suffix_len,
            prefix_repetition_num_prefixes=prefix_repetition_num_prefixes,
            prefix_repetition_output_len=prefix_repetition_output_len,
            multi_turn_turns=multi_turn_turns,
            multi_turn_input_len=multi_turn_input_len,
            multi_turn_output_len=multi_turn_output_len,
            time_scale=time_scale,
            trace_block_size=trace_block_size,
            request_rate=request_rate,
            burstiness=burstiness,
            max_concurrency=max_concurrency,
            seed=seed,
            num_warmups=num_warmups,
            ignore_eos=ignore_eos,
            temperature=temperature,
            omit_fields=frozenset(omit_field or ()),
            goodput=parse_goodput(goodput_pairs) if goodput_pairs else None,
            percentile_metrics=tuple(m.strip() for m in percentile_metrics.split(",") if m.strip()),
            metric_percentiles=_parse_percentiles(metric_percentiles),
            request_timeout_s=request_timeout,
        )
        config.validate()
        target = None
        if save_result or result_filename:
            target = _result_dir(result_dir)
        tok = load_tokenizer(config.tokenizer)
        requests = load_requests(config, tok)
    except BenchInputError as exc:
        _fail(str(exc), EXIT_INPUT)

    unreachable = asyncio.run(_probe(config))
    if unreachable:
        _fail(f"cannot reach the server at {config.base_url}: {unreachable}", EXIT_INPUT)

    print(f"Traffic request rate: {config.request_rate}")
    kind = "Poisson process" if config.burstiness == 1.0 else "Gamma distribution"
    print(f"Burstiness factor: {config.burstiness} ({kind})")
    print(f"Maximum request concurrency: {config.max_concurrency}")
    try:
        result = _run_with_progress(config, requests, show=not disable_tqdm)
    except KeyboardInterrupt:
        _fail("interrupted; no result written", 130)
    except BenchInputError as exc:
        _fail(str(exc), EXIT_INPUT)
    except Exception as exc:  # a client bug or resource exhaustion: one line, not a traceback
        _fail(f"benchmark failed: {type(exc).__name__}: {exc}", EXIT_RUNTIME)

    print(result.summary())
    _report_client(result)
    if result.metrics["completed"] == 0:
        _fail("every request failed; no result written", EXIT_RUNTIME)
    if target is not None:
        path = target / (result_filename or default_result_filename(result))
        try:
            write_atomic(path, json.dumps(result.to_json()))
        except OSError as exc:
            _fail(f"cannot write the result file {path}: {exc}", EXIT_RUNTIME)
        print(f"Result saved to {path}")


def _goodput_tail(extra: list[str]) -> list[str]:
    # vLLM takes `--goodput ttft:500 tpot:50`; click leaves the words after the first as extras.
    bad = [a for a in extra if not _GOODPUT_WORD.match(a)]
    if bad:
        raise BenchInputError(f"unexpected argument(s): {' '.join(bad)}")
    return list(extra)


def _parse_percentiles(text: str) -> tuple[float, ...]:
    try:
        return tuple(float(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise BenchInputError(f"--metric-percentiles {text!r} is not a comma list of numbers") from None


def _join_host_port(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _result_dir(result_dir: str | None) -> Path:
    target = Path(result_dir or ".").expanduser()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BenchInputError(f"--result-dir {str(target)!r} cannot be created: {exc}") from None
    if not os.access(target, os.W_OK):
        raise BenchInputError(f"--result-dir {str(target)!r} is not writable")
    return target


async def _probe(config: BenchConfig) -> str | None:
    async with make_client(config) as client:
        return await probe(client, config.base_url)


def _run_with_progress(config: BenchConfig, requests: list, *, show: bool) -> BenchResult:
    if not show:
        return run_benchmark(config, input_requests=requests)
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn("requests"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task("bench", total=len(requests))
        return run_benchmark(config, input_requests=requests,
                             on_progress=lambda done, total: bar.update(task, completed=done))


def _report_client(result: BenchResult) -> None:
    err = sys.stderr
    if result.errors:
        print(f"{result.metrics['failed']} request(s) failed:", file=err)
        for line in result.errors[:10]:
            print(f"  {line}", file=err)
    print(f"Client CPU: {result.client_cpu_percent:.0f}% of one core", file=err)
    if result.client_saturated:
        print("warning: the benchmark client was saturated (>= 90% of a core); the numbers may "
              "describe the client rather than the server", file=err)


def _fail(message: str, code: int) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise typer.Exit(code)
