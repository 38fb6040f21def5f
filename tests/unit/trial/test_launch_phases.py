"""Where a launch's time goes, read from real engine logs: vLLM 0.32.0 on CPU (captured from a
`tune start` trial on the tiny model), vLLM 0.25.1 and SGLang 0.5.17 on the H200 (recorded trials,
cut after the engine's ready line). Each expected value is the number printed in the log."""

from __future__ import annotations

import pytest

from tests.helpers import DATA
from tuner.engines.spec import EngineSpec, load_engine
from tuner.trial.launch_phases import breakdown, read_phases

LOGS = DATA / "logs"
LAUNCH = LOGS / "launch"


def phases(engine: str, log: str, launch_s: float | None = None) -> dict:
    return breakdown(load_engine(engine).launch_phases, (LAUNCH / log).read_text(), launch_s)


def test_vllm_gpu_log_that_compiled():
    # "Model loading took 27.52 GiB and 2.113915 seconds", "torch.compile took 41.10 s in total",
    # "Graph capturing finished in 9 secs", "init engine (...) took 73.59 s (compilation: 41.10 s)",
    # "Compiling a graph for compile range (1, 8192) takes 19.43 s"
    got = phases("vllm", "vllm-0.25.1-h200-compile.log", launch_s=122.0)
    assert got == {"weights_s": 2.11, "compile_s": 41.1, "cuda_graphs_s": 9.0,
                   "kv_profile_s": pytest.approx(73.59 - 41.10 - 9), "compile_cache_hit": False,
                   "other_s": pytest.approx(122.0 - 73.59 - 2.11)}


def test_vllm_block_fp8_checkpoint_log_times_the_deepgemm_warmup():
    # An H100 launch of the block-scaled FP8 checkpoint: "DeepGEMM warmup: 100%|...| 1138/1138
    # [03:34<00:00, ...]" inside "init engine (...) took 310.91 s (compilation: 43.13 s)", next to
    # "Model loading took 15.37 GiB and 10.669083 seconds" and "Graph capturing finished in 8 secs"
    got = phases("vllm", "vllm-0.25.1-h100-fp8-checkpoint.log", launch_s=382.77)
    assert got == {"weights_s": 10.67, "compile_s": 43.13, "kernels_s": 214.0, "cuda_graphs_s": 8.0,
                   "kv_profile_s": pytest.approx(310.91 - 43.13 - 214 - 8), "compile_cache_hit": False,
                   "other_s": pytest.approx(382.77 - 310.91 - 10.67)}


def test_vllm_gpu_log_with_a_compile_cache_hit():
    # "Directly load the compiled graph(s) for compile range (1, 2048) from the cache, took 3.865 s",
    # "torch.compile took 12.63 s in total", "init engine (...) took 23.38 s (compilation: 12.63 s)"
    got = phases("vllm", "vllm-0.25.1-h200-compile-cache-hit.log")
    assert got == {"weights_s": 3.46, "compile_s": 12.63, "cuda_graphs_s": 6.0,
                   "kv_profile_s": pytest.approx(23.38 - 12.63 - 6), "compile_cache_hit": True}


def test_sglang_gpu_log_adds_prefill_and_decode_graphs():
    # "Load weight end. elapsed=0.41 s", "Capture target prefill CUDA graph end. elapsed=97.63 s",
    # "Capture target decode CUDA graph end. elapsed=6.66 s", "kv_cache_allocation=0.04"
    got = phases("sglang", "sglang-0.5.17-h200.log", launch_s=140.0)
    assert got == {"weights_s": 0.41, "cuda_graphs_s": pytest.approx(97.63 + 6.66),
                   "kv_profile_s": 0.04, "other_s": pytest.approx(140.0 - 0.41 - 104.29 - 0.04)}
    assert "compile_s" not in got and "compile_cache_hit" not in got  # SGLang times neither


def test_vllm_cpu_log_eager():
    # vLLM 0.32.0's CPU runner logs "Initializing model took 0.901502 seconds" (no "Model loading
    # took") and "init engine (profile, create kv cache, warmup model) took 6.55 s"; with
    # --enforce-eager it compiles nothing and captures no graphs.
    got = phases("vllm", "vllm-0.32.0-cpu-eager.log", launch_s=105.0)
    assert got == {"weights_s": 0.9, "kv_profile_s": 6.55,
                   "other_s": pytest.approx(105.0 - 0.9 - 6.55)}


def test_the_usual_line_wins_over_a_fallback():
    """A GPU build logs model creation too, then "Model loading took" for the whole: count once."""
    text = ("INFO [base_loader.py:82] Initializing model took 1.500000 seconds\n"
            "INFO [model_runner.py:302] Model loading took 27.52 GiB and 2.113915 seconds\n")
    assert read_phases(load_engine("vllm").launch_phases, text) == {"weights_s": 2.11}


@pytest.mark.parametrize("engine, log", [
    ("vllm", LOGS / "vllm-0.25.1-h200-kv-cache-too-small.log"),
    ("vllm", LOGS / "vllm-0.32.0-cpu-invalid-config-max-num-seqs-0.log"),
    ("sglang", LOGS / "sglang-0.5.5.post1-cpu-invalid-config-max-len-over-model.log"),
], ids=lambda v: getattr(v, "stem", v))
def test_a_log_without_phase_lines_gives_nothing(engine, log):
    """Refusals that died before any timed phase: no phase, no zero, no made-up rest."""
    assert breakdown(load_engine(engine).launch_phases, log.read_text(), 30.0) == {}


def test_ranks_side_by_side_count_once():
    """Each tensor-parallel worker logs its own load: the longest is the phase's time."""
    text = "\n".join(
        f"(Worker_TP{rank} pid={100 + rank}) INFO 12-02 00:36:26 [model_runner.py:302] Model "
        f"loading took 13.76 GiB and {seconds} seconds" for rank, seconds in ((0, 2.5), (1, 3.25)))
    assert read_phases(load_engine("vllm").launch_phases, text) == {"weights_s": 3.25}


def test_a_pattern_needs_one_group_for_the_seconds():
    data = load_engine("vllm").model_dump(by_alias=True)
    data["launch_phases"]["weights_s"][0]["pattern"] = "Model loading took"
    with pytest.raises(ValueError, match="exactly one group"):
        EngineSpec.model_validate(data)
