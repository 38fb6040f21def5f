"""calculate_metrics and the summary block against numbers worked out by hand (vLLM 0.33 formulas)."""

import math

import pytest

from tuner.bench.metrics import calculate_metrics, percentile_key
from tuner.bench.request import RequestOutput
from tuner.bench.summary import format_summary


def _outputs() -> list[RequestOutput]:
    # A: 3 chunks, usage says 3 tokens.        tpot = (0.6 - 0.1) / 2 = 0.25
    # B: 2 chunks, no usage: re-tokenized to 5. tpot = (0.6 - 0.2) / 4 = 0.10
    # C: 1 chunk, 1 token: no TPOT (0 for goodput).
    # D: failed.
    return [
        RequestOutput(success=True, start_time=0.0, ttft=0.1, itl=[0.2, 0.3], latency=0.6,
                      output_tokens=3, prompt_len=10),
        RequestOutput(success=True, start_time=0.5, ttft=0.2, itl=[0.4], latency=0.6,
                      output_tokens=None, generated_text="abcde", prompt_len=20),
        RequestOutput(success=True, start_time=1.0, ttft=0.05, itl=[], latency=0.05,
                      output_tokens=1, prompt_len=30),
        RequestOutput(success=False, error="boom", prompt_len=40),
    ]


def _calc(**kw):
    kw.setdefault("count_tokens", len)
    return calculate_metrics(_outputs(), 2.0, **kw)


def test_totals_and_throughputs():
    m, lens = _calc()
    assert lens == [3, 5, 1, 0]
    assert m["completed"] == 3 and m["failed"] == 1
    assert m["total_input_tokens"] == 60  # failed requests' prompts do not count
    assert m["total_output_tokens"] == 9
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(4.5)
    assert m["total_token_throughput"] == pytest.approx(34.5)
    assert m["request_goodput"] is None


def test_latency_stats_use_linear_percentiles_and_population_std():
    m, _ = _calc(percentile_metrics=("ttft", "tpot", "itl", "e2el"))
    assert m["mean_ttft_ms"] == pytest.approx(116.6666667)
    assert m["median_ttft_ms"] == pytest.approx(100.0)
    assert m["std_ttft_ms"] == pytest.approx(62.3609564)
    assert m["p99_ttft_ms"] == pytest.approx(198.0)          # 0.1 + 0.98 * (0.2 - 0.1)
    # TPOT only over requests with more than one output token: [0.25, 0.10]
    assert m["mean_tpot_ms"] == pytest.approx(175.0)
    assert m["std_tpot_ms"] == pytest.approx(75.0)
    assert m["p99_tpot_ms"] == pytest.approx(248.5)
    # ITL over the flattened chunk gaps [0.2, 0.3, 0.4]
    assert m["mean_itl_ms"] == pytest.approx(300.0)
    assert m["std_itl_ms"] == pytest.approx(81.6496581)
    assert m["p99_itl_ms"] == pytest.approx(398.0)
    assert m["mean_e2el_ms"] == pytest.approx(416.6666667)
    assert m["median_e2el_ms"] == pytest.approx(600.0)


def test_peak_tokens_and_concurrency_count_chunks_per_second_bucket():
    m, _ = _calc()
    # chunk times: A 0.1 0.3 0.6 | B 0.7 1.1 | C 1.05  -> buckets [4, 2, 0]
    assert m["max_output_tokens_per_s"] == 4.0
    # A in bucket 0; B in 0 and 1; C in 1
    assert m["max_concurrent_requests"] == 2


def test_goodput_every_slo_must_hold_and_equality_passes():
    m, _ = _calc(goodput={"ttft": 150.0, "tpot": 200.0})
    assert m["request_goodput"] == pytest.approx(0.5)  # only C: A's TPOT and B's TTFT miss
    m, _ = _calc(goodput={"ttft": 200.0})
    assert m["request_goodput"] == pytest.approx(1.5)  # B's TTFT equals the SLO: good
    m, _ = _calc(goodput={"e2el": 100.0})
    assert m["request_goodput"] == pytest.approx(0.5)


def test_without_tokenizer_a_usage_less_request_counts_one_token():
    _, lens = calculate_metrics(_outputs(), 2.0, count_tokens=None)
    assert lens == [3, 1, 1, 0]


def test_field_names_and_order_match_vllm_result_json():
    m, _ = _calc(percentile_metrics=("e2el", "itl", "ttft", "tpot"), percentiles=(50.0, 99.9))
    assert list(m)[:11] == [
        "duration", "completed", "failed", "total_input_tokens", "total_output_tokens",
        "request_throughput", "request_goodput", "output_throughput", "total_token_throughput",
        "max_output_tokens_per_s", "max_concurrent_requests"]
    stats = list(m)[11:]
    assert stats[:5] == ["mean_ttft_ms", "median_ttft_ms", "std_ttft_ms", "p50_ttft_ms",
                         "p99.9_ttft_ms"]
    assert [k.split("_")[1] for k in stats[::5]] == ["ttft", "tpot", "itl", "e2el"]


def test_unselected_metrics_are_absent():
    m, _ = _calc()
    assert "mean_e2el_ms" not in m and "p99_itl_ms" in m


def test_percentile_key_spelling():
    assert percentile_key(99.0, "ttft") == "p99_ttft_ms"
    assert percentile_key(99.9, "itl") == "p99.9_itl_ms"
    assert percentile_key(50, "tpot") == "p50_tpot_ms"


def test_all_failed_gives_zeros_not_errors():
    outs = [RequestOutput(error="x"), RequestOutput(error="y")]
    m, lens = calculate_metrics(outs, 1.0, count_tokens=len, goodput={"ttft": 1.0})
    assert lens == [0, 0]
    assert m["completed"] == 0 and m["failed"] == 2
    assert m["mean_ttft_ms"] == 0 and m["p99_itl_ms"] == 0
    assert m["max_output_tokens_per_s"] == 0.0 and m["max_concurrent_requests"] == 0
    assert m["request_goodput"] == 0.0


def test_client_queue_metrics_only_with_max_concurrency():
    outs = _outputs()
    for o, q in zip(outs, (0.0, 0.1, 0.2, 0.0)):
        o.client_queue_time = q
    sel = ("ttft", "client_queue_time", "e2el_including_client_queue")
    m, _ = calculate_metrics(outs, 2.0, count_tokens=len, percentile_metrics=sel,
                             max_concurrency=2, request_rate=4.0)
    assert m["mean_client_queue_time_ms"] == pytest.approx(100.0)
    assert m["mean_e2el_including_client_queue_ms"] == pytest.approx((0.6 + 0.7 + 0.25) / 3 * 1000)
    m, _ = calculate_metrics(outs, 2.0, count_tokens=len, percentile_metrics=sel,
                             max_concurrency=2, request_rate=math.inf)
    assert "mean_client_queue_time_ms" in m and "mean_e2el_including_client_queue_ms" not in m
    m, _ = calculate_metrics(outs, 2.0, count_tokens=len, percentile_metrics=sel)
    assert "mean_client_queue_time_ms" not in m


def test_summary_block_layout_is_vllms():
    m, _ = _calc(goodput={"ttft": 150.0}, percentiles=(50.0, 99.0))
    text = format_summary(m, max_concurrency=4, request_rate=8.0,
                          percentile_metrics=("ttft", "tpot", "itl"), percentiles=(50.0, 99.0))
    lines = text.splitlines()
    assert lines[0] == "============ Serving Benchmark Result ============"
    assert lines[1] == "Successful requests:                     3         "
    assert lines[2] == "Failed requests:                         1         "
    assert lines[3] == "Maximum request concurrency:             4         "
    assert lines[4] == "Request rate configured (RPS):           8.00      "
    assert lines[5] == "Benchmark duration (s):                  2.00      "
    assert "Request goodput (req/s):                 1.00      " in lines  # A and C
    assert "Peak concurrent requests:                2.00      " in lines
    assert "---------------Time to First Token----------------" in lines
    assert "-----Time per Output Token (excl. 1st token)------" in lines
    assert "---------------Inter-token Latency----------------" in lines
    assert "P50 TTFT (ms):                           100.00    " in lines
    assert "P99 ITL (ms):                            398.00    " in lines
    assert lines[-1] == "=" * 50
    plain = format_summary(m, max_concurrency=None, request_rate=math.inf,
                           percentile_metrics=("ttft",), percentiles=(99.0,))
    assert "Maximum request concurrency" not in plain and "Request rate configured" not in plain
    assert "Inter-token Latency" not in plain
