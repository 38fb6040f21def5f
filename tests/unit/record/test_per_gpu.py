"""Tokens per GPU-hour: the objective that lets a two-GPU launch compete with a one-GPU launch."""

import pytest

from tuner.engines.spec import load_engine
from tuner.record.per_gpu import GPUS, TOKENS_PER_GPU_HOUR, per_gpu
from tuner.record.slo import metric_value


def test_tokens_per_gpu_hour_divides_by_the_gpus_the_launch_took():
    assert per_gpu({"total_token_throughput": 5000.0}, 2) == {GPUS: 2, TOKENS_PER_GPU_HOUR: 9.0e6}
    assert per_gpu({"total_token_throughput": 5000.0}, 1)[TOKENS_PER_GPU_HOUR] == 18.0e6


def test_per_gpu_ranks_unlike_raw_throughput():
    """tp 2 serves more tokens per second than tp 1 but fewer per GPU: the per-GPU objective picks
    tp 1 (run it twice, one per GPU), raw throughput picks tp 2."""
    vllm = load_engine("vllm")
    tp1 = {"total_token_throughput": 3000.0, **per_gpu({"total_token_throughput": 3000.0},
                                                       vllm.gpus({"tensor_parallel": 1}))}
    tp2 = {"total_token_throughput": 5000.0, **per_gpu({"total_token_throughput": 5000.0},
                                                       vllm.gpus({"tensor_parallel": 2}))}
    assert metric_value(tp2, "total_token_throughput") > metric_value(tp1, "total_token_throughput")
    assert metric_value(tp1, TOKENS_PER_GPU_HOUR) > metric_value(tp2, TOKENS_PER_GPU_HOUR)


def test_omitted_parallel_knobs_run_on_one_gpu():
    """A defaults baseline omits its knobs: the engine runs them at 1, whatever the space's value."""
    vllm = load_engine("vllm")
    knobs = {"tensor_parallel": 2, "data_parallel": 2}
    assert vllm.gpus(knobs) == 4
    assert vllm.gpus(knobs, frozenset({"data_parallel"})) == 2
    assert vllm.gpus(knobs, frozenset(knobs)) == 1


def test_no_throughput_no_rate():
    assert per_gpu({"completed": 0}, 2) == {GPUS: 2}
    with pytest.raises(ValueError, match="at least one GPU"):
        per_gpu({"total_token_throughput": 1.0}, 0)
