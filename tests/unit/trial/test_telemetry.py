"""Telemetry: the Prometheus parser on real engine output, and CPU sampling of a real process group."""

from __future__ import annotations

import http.server
import json
import os
import subprocess
import sys
import threading
import time

import pytest

from tuner.runtime.procgroup import kill_group
from tuner.trial.telemetry import (
    MetricsParseError,
    TelemetrySampler,
    derived,
    engine_view,
    parse_prometheus,
    totals,
)

# Lines from vLLM 0.32.0 (CPU) /metrics after a 200-prompt benchmark, trimmed.
VLLM_METRICS = """\
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 14880.0
process_resident_memory_bytes 6.90475008e+08
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-qwen3"} 0.0
vllm:num_requests_waiting{engine="0",model_name="tiny-qwen3"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny-qwen3",reason="capacity"} 0.0
vllm:num_requests_waiting_by_reason{engine="0",model_name="tiny-qwen3",reason="deferred"} 0.0
vllm:kv_cache_usage_perc{engine="0",model_name="tiny-qwen3"} 0.0
vllm:num_preemptions_total{engine="0",model_name="tiny-qwen3"} 0.0
vllm:num_preemptions_created{engine="0",model_name="tiny-qwen3"} 1.7960046040314891e+09
vllm:request_success_total{engine="0",finished_reason="stop",model_name="tiny-qwen3"} 0.0
vllm:request_success_total{engine="0",finished_reason="length",model_name="tiny-qwen3"} 200.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="tiny-qwen3"} 0.0
vllm:generation_tokens_total{engine="0",model_name="tiny-qwen3"} 6400.0
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="tiny-qwen3"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny-qwen3"} 200.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny-qwen3"} 200.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny-qwen3"} 1013.0413408279419
"""


def test_parser_reads_labels_values_and_histograms():
    samples = parse_prometheus(VLLM_METRICS)
    assert len(samples) == 17
    bucket = [s for s in samples if s.name == "vllm:time_to_first_token_seconds_bucket"][1]
    assert bucket.labels == {"engine": "0", "le": "+Inf", "model_name": "tiny-qwen3"}
    assert bucket.value == 200.0
    assert samples[1].labels == {} and samples[1].value == pytest.approx(6.90475008e8)
    t = totals(samples)
    assert t["vllm:request_success_total"] == 200.0  # summed over finished_reason
    assert "process_resident_memory_bytes" not in t and "vllm:num_preemptions_created" not in t
    assert not any(k.endswith("_bucket") for k in t)


def test_parser_handles_escapes_special_values_and_timestamps():
    text = ('m{path="/a,b",msg="say \\"hi\\"\\n",back="c:\\\\x"} NaN 1700000000000\n'
            'g +Inf\nh -Inf\n  \n# comment only\n')
    m, g, h = parse_prometheus(text)
    assert m.labels == {"path": "/a,b", "msg": 'say "hi"\n', "back": "c:\\x"}
    assert m.value != m.value  # NaN
    assert g.value == float("inf") and h.value == float("-inf")


@pytest.mark.parametrize("line, what", [
    ("vllm:x{engine=0} 1", "bad label set"),
    ("vllm:x one", "is not a number"),
    ("{a=\"b\"} 1", "not a metric sample"),
])
def test_parser_errors_name_the_source_and_line(line, what):
    with pytest.raises(MetricsParseError, match=rf"http://e/metrics line 2: .*{what}"):
        parse_prometheus("ok 1\n" + line, "http://e/metrics")


def test_engine_view_differences_counters_and_histograms_and_keeps_gauge_peaks():
    before = totals(parse_prometheus(VLLM_METRICS))
    after = dict(before, **{"vllm:num_preemptions_total": 3.0,
                            "vllm:generation_tokens_total": 6400.0 + 3200.0,
                            "vllm:time_to_first_token_seconds_count": 300.0,
                            "vllm:time_to_first_token_seconds_sum": 1013.0413408279419 + 50.0})
    view = engine_view(before, after, {"vllm:kv_cache_usage_perc": [0.0, 0.5, 0.25]})
    assert view["preemptions"] == {"metric": "vllm:num_preemptions_total", "delta": 3.0}
    assert view["generation_tokens"]["delta"] == 3200.0
    assert view["ttft_s"]["count"] == 100.0 and view["ttft_s"]["mean"] == pytest.approx(0.5)
    assert view["kv_cache_usage"]["max"] == 0.5
    assert view["requests_running"]["max"] == 0.0  # no samples during the run: the value after


def test_engine_view_names_sglang_and_tensorrt_llm_metrics():
    sglang = {"sglang:num_running_reqs": 4.0, "sglang:token_usage": 0.9,
              "sglang:num_retracted_requests_total": 7.0}
    trt = {"trtllm_num_requests_waiting": 2.0, "trtllm_kv_cache_utilization": 0.4}
    v = engine_view({}, sglang, {})
    assert v["kv_cache_usage"]["metric"] == "sglang:token_usage"
    assert v["preemptions"] == {"metric": "sglang:num_retracted_requests_total", "delta": 7.0}
    v = engine_view({}, trt, {})
    assert v["requests_waiting"]["metric"] == "trtllm_num_requests_waiting"
    assert v["kv_cache_usage"]["max"] == 0.4


class _MetricsHandler(http.server.BaseHTTPRequestHandler):
    scrapes = 0

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).scrapes += 1
        running = 8.0 if type(self).scrapes > 1 else 0.0
        body = (VLLM_METRICS.replace('vllm:num_requests_running{engine="0",model_name="tiny-qwen3"} 0.0',
                                     f'vllm:num_requests_running{{engine="0",model_name="tiny-qwen3"}} {running}')
                + f'vllm:num_preemptions_total{{engine="1",model_name="tiny-qwen3"}} {type(self).scrapes}\n')
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def busy_group():
    """A real process group of two CPU-burning processes, as an engine's would be."""
    code = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'while True: pass']); "
            "x = [0] * 5_000_000\nwhile True: pass")
    proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    time.sleep(0.5)
    yield proc.pid
    kill_group(proc.pid, grace_s=2, leader=proc)
    assert proc.poll() is not None


@pytest.fixture
def metrics_server():
    _MetricsHandler.scrapes = 0
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _MetricsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics"
    server.shutdown()
    server.server_close()


def test_sampler_on_cpu_records_the_engine_group_and_metrics(busy_group, metrics_server, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # irrelevant to NVML, but keeps intent clear
    with TelemetrySampler(busy_group, metrics_server, interval_s=0.2, metrics_interval_s=0.4) as t:
        time.sleep(2.0)
    r = t.result()
    json.dumps(r)  # stored as an Optuna user attr: must be JSON
    assert r["gpu"] is False and "no GPU" in r["note"] and r["energy_j"] is None
    assert r["samples"] >= 5 and 1.8 < r["duration_s"] < 4
    cpu = r["cpu"]
    assert cpu["engine_processes"]["max"] == 2.0
    # Two busy loops: measurably busy even when other work shares the 2 cores.
    assert cpu["engine_cpu_pct"]["max"] > 10.0, cpu["engine_cpu_pct"]
    assert cpu["engine_rss_mib"]["min"] > 30.0  # the 5M-element list lives in the leader
    assert 0.0 < cpu["machine_cpu_pct"]["mean"] <= 100.0
    em = r["engine_metrics"]
    assert em["summary"]["requests_running"]["max"] == 8.0  # seen during the run, not before
    assert em["delta"]["vllm:num_preemptions_total"] >= 2.0  # summed over engine="0" and "1"
    assert "errors" not in r
    d = derived(r, output_tokens=100)
    assert d["joules_per_output_token"] is None and d["gpu_memory_peak_mib"] is None
    assert d["engine_cpu_mean_pct"] > 0 and d["engine_rss_peak_mib"] > 30.0


def test_sampler_survives_a_dead_metrics_endpoint_and_a_vanished_group():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"],
                            start_new_session=True)
    with TelemetrySampler(proc.pid, "http://127.0.0.1:9/metrics", interval_s=0.1) as t:
        proc.wait()  # the group vanishes mid-run
        time.sleep(0.5)
    r = t.result()
    assert any("scrape http://127.0.0.1:9/metrics" in e for e in r["errors"])
    assert r["engine_metrics"]["summary"] == {} and r["cpu"]["engine_processes"]["min"] == 0.0


def test_derived_figures_from_gpu_samples():
    gpu = {"memory_used_mib": {"min": 1, "mean": 2, "max": 70_000.0},
           "utilization_pct": {"min": 0, "mean": 80.0, "max": 100},
           "power_w": {"min": 100, "mean": 500.0, "max": 700}}
    result = {"gpu": True, "energy_j": 1200.0, "cpu": {},
              "gpus": [gpu, dict(gpu, memory_used_mib={"min": 1, "mean": 2, "max": 60_000.0},
                                 utilization_pct={"min": 0, "mean": 40.0, "max": 90})]}
    d = derived(result, output_tokens=400)
    assert d["joules_per_output_token"] == 3.0
    assert d["gpu_memory_peak_mib"] == 70_000.0
    assert d["gpu_utilization_mean_pct"] == 60.0 and d["gpu_power_mean_w"] == 1000.0


def test_interval_must_be_positive():
    with pytest.raises(ValueError, match="interval_s must be positive, got 0"):
        TelemetrySampler(os.getpid(), None, interval_s=0)
