"""Online FP8 and the FP8 KV cache through the whole bridge (space -> request -> AIConfigurator),
on the shape and GPU of the H200 spaces, against the real aiconfigurator-core package."""

import itertools
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tuner.configs.predict import predict
from tuner.engines.hardware import profile
from tuner.estimate import get_estimator
from tuner.estimate.aiconfigurator import _measured_gemm, _Plan, _Unsupported, engine_modes
from tuner.space import space_from_dict
from tuner.engines.model_config import published_shape
from tuner.tiny_model import with_local_tokenizer

aic_core = pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: "
                               "pip install 'tuner[estimate]'")

ENGINES = {"vllm": "0.25.1", "sglang": "0.5.17"}
# Qwen/Qwen3-14B's published config.json (vocabulary 151936, untied embeddings), as
# `tune model tiny --shape qwen3-14b` writes it.
QWEN3_14B = with_local_tokenizer(published_shape("Qwen/Qwen3-14B"))


@pytest.fixture(scope="module")
def h200_space(tmp_path_factory):
    """A space shaped like h200-vllm / h200-sglang / h200-engines: a local BF16 checkpoint (no FP8
    variant, so fp8 is the engines' online quantization), ShareGPT at rate inf, 400 prompts."""
    model = tmp_path_factory.mktemp("models") / "Qwen3-14B"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN3_14B))
    params = {
        "quantization": {"type": "categorical", "choices": ["none", "fp8"], "default": "none"},
        "kv_cache_dtype": {"type": "categorical", "choices": ["auto", "fp8"], "default": "auto"},
        "max_num_seqs": {"type": "categorical", "choices": [128, 256, 512]},
        "max_num_tokens": {"type": "categorical", "choices": [8192, 16384]},
        "chunked_prefill": {"type": "bool", "default": True},
        "gpu_memory_utilization": {"type": "float", "low": 0.85, "high": 0.95, "step": 0.05},
    }
    return space_from_dict({
        "name": "h200-engines-test",
        "model": {"path": str(model)},
        "engines": {e: {"command": [f"/opt/{e}-{v}/bin/{e}"], "params": params}
                    for e, v in ENGINES.items()},
        "workload": {"name": "sharegpt-400", "dataset": "sharegpt", "dataset_path": "sharegpt.json",
                     "num_prompts": 400, "request_rate": float("inf")},
        "objective": {"metric": "total_token_throughput", "direction": "maximize"},
        "budget": {"n_trials": 8},
    })


def _predict(space, engine, **knobs):
    return predict(get_estimator("aiconfigurator"), space, engine, knobs, profile("h200-141gb"))


@pytest.mark.parametrize("engine,quantization,kv_cache_dtype",
                         list(itertools.product(ENGINES, ["none", "fp8"], ["auto", "fp8"])))
@pytest.mark.parametrize("knobs", [{}, {"max_num_seqs": 256, "max_num_tokens": 16384,
                                        "gpu_memory_utilization": 0.9}])
def test_every_precision_of_the_h200_spaces_gets_a_number(h200_space, engine, quantization,
                                                          kv_cache_dtype, knobs):
    est = _predict(h200_space, engine, quantization=quantization, kv_cache_dtype=kv_cache_dtype,
                   **knobs)
    assert est.predicted, est.unsupported
    assert f"h200_sxm/{engine}" in est.source and "SILICON" in est.source
    assert 1000 < est.total_tok_s < 100_000
    online = [n for n in est.notes if n.startswith("online fp8")]
    assert bool(online) == (quantization == "fp8")
    assert not any("modelled as" in n for n in est.notes)  # the exact modes have data on h200_sxm


@pytest.mark.parametrize("engine,scale", [("vllm", "one scale per tensor"),
                                          ("sglang", "one scale per output channel")])
def test_online_fp8_is_the_engines_own_scheme_and_faster(h200_space, engine, scale):
    bf16 = _predict(h200_space, engine)
    fp8 = _predict(h200_space, engine, quantization="fp8")
    assert any(scale in n for n in fp8.notes)
    assert fp8.total_tok_s > 1.1 * bf16.total_tok_s
    assert fp8.memory_gib < bf16.memory_gib - 10  # 14.8 B params at 1 byte instead of 2


def test_fp8_kv_cache_holds_twice_the_tokens(h200_space):
    """At a memory setting where the BF16 KV cache caps the batch, the FP8 one holds twice as many."""
    knobs = {"max_num_seqs": 512, "gpu_memory_utilization": 0.3}
    bf16, fp8 = (_predict(h200_space, "vllm", kv_cache_dtype=kv, **knobs) for kv in ("auto", "fp8"))
    assert bf16.batch < 512 and fp8.batch == pytest.approx(2 * bf16.batch, rel=0.05)


def test_online_fp8_without_fp8_compute_names_the_missing_mode(h200_space):
    """On SM 80, vLLM runs online FP8 as W8A16 (Marlin); AIC measured no such GEMM for vLLM there."""
    est = predict(get_estimator("aiconfigurator"), h200_space, "vllm", {"quantization": "fp8"},
                  profile("a100-sxm-80gb"))
    assert est.unsupported.startswith("AIConfigurator has no GEMM data for int8_wo in "
                                      "systems/data/a100_sxm/gemm/vllm/")


def test_the_mode_table_names_real_modes_with_data_on_h200():
    """Every mode in aiconfigurator_modes.yaml is one of the installed package's enum members, and
    the first GEMM mode of each online entry (what AIC measured for that engine) has h200 data."""
    common = pytest.importorskip("aiconfigurator_core.sdk.common")
    pq = pytest.importorskip("pyarrow.parquet")
    table = engine_modes()
    data = aic_core.__path__[0] + "/systems/data/h200_sxm/gemm"
    for engine, entries in table.online_gemm.items():
        for entry in entries.values():
            assert set(entry.modes) <= set(common.GEMMQuantMode.__members__)
            (perf,) = Path(data, engine).glob("*/gemm_perf.parquet")
            assert entry.modes[0] in set(pq.read_table(perf, columns=["gemm_dtype"]).column(0)
                                         .to_pylist())
    for entries in table.kv_cache.values():
        for kv in entries.values():
            assert kv.kvcache in common.KVCacheQuantMode.__members__
            assert kv.fmha is None or kv.fmha in common.FMHAQuantMode.__members__


def _plan(first: str, *fallbacks: str) -> _Plan:
    return _Plan(system="h200_sxm", backend="vllm", version="0.24.0", model_path="m",
                 gemm_quant_mode=first, gemm_fallbacks=fallbacks, kvcache_quant_mode=None,
                 fmha_quant_mode=None, tp=1, max_num_seqs=1, max_num_tokens=1,
                 chunked_prefill=True, memory_fraction=None, notes=())


def test_a_mode_without_data_falls_back_and_says_so():
    """No engine version in aiconfigurator-core 0.12.0 lacks fp8 while having fp8_block, so the
    substitution is shown on a database that reports only what it has."""
    db = SimpleNamespace(supported_quant_mode={"gemm": ["bfloat16", "fp8_block"]})
    assert _measured_gemm(_plan("fp8", "fp8_block"), db, "SILICON") == (
        "fp8_block", ["AIC has no fp8 GEMM data in systems/data/h200_sxm/gemm/vllm/0.24.0: "
                      "modelled as fp8_block"])
    assert _measured_gemm(_plan("fp8", "fp8_block"), db, "HYBRID") == ("fp8", [])
    with pytest.raises(_Unsupported, match=r"no GEMM data for fp8 in .* \(it has bfloat16\)"):
        _measured_gemm(_plan("fp8"), SimpleNamespace(supported_quant_mode={"gemm": ["bfloat16"]}),
                       "SILICON")
