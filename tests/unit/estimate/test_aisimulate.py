"""The AISimulate estimator: its registration, its answer without the package, the request →
``aisimulate predict`` YAML mapping and the summary → estimate reading (neither needs the package),
and one real simulation where the `simulate` extra is installed."""

import json
from importlib.util import find_spec
from pathlib import Path

import pytest
import yaml

import tuner.estimate.aisimulate as aisim
from tuner.estimate import ESTIMATORS, EstimateRequest, get_estimator
from tuner.estimate.aiconfigurator import _Unsupported, engine_modes

SKIP_REAL = "aisimulate not installed: pip install 'tuner[simulate]' (needs https://pypi.nvidia.com)"

# An H200 and an A100 as AIC-format system files give them (bytes, SM): what the mapping reads.
SYSTEMS = {"h200_sxm": (150_323_855_360, 90), "a100_sxm": (85_899_345_920, 80)}


@pytest.fixture
def package_dir(tmp_path: Path) -> Path:
    """A stand-in for the installed aisimulate_core folder: systems/ and model_configs/."""
    (tmp_path / "systems").mkdir()
    (tmp_path / "model_configs").mkdir()
    for name, (mem, sm) in SYSTEMS.items():
        (tmp_path / "systems" / f"{name}.yaml").write_text(
            yaml.safe_dump({"gpu": {"mem_capacity": mem, "sm_version": sm}}))
    return tmp_path


def _req(engine: str = "vllm", gpu: str = "h200-141gb", concurrency: int | None = 64,
         **knobs) -> EstimateRequest:
    return EstimateRequest(engine=engine, knobs=knobs, model="Qwen/Qwen3-32B", input_len=1024,
                           output_len=128, gpu=gpu, max_concurrency=concurrency)


def _worker(sim: aisim.Simulation) -> dict:
    return sim.config["engine"]["workers"]["aggregated"]


def test_the_registry_lists_it():
    assert "aisimulate" in ESTIMATORS
    est = get_estimator("aisimulate")
    assert est.name == "aisimulate"
    assert {"max_num_seqs", "quantization", "kv_cache_dtype"} <= est.modelled


def test_without_the_package_it_names_the_install(monkeypatch):
    monkeypatch.setattr(aisim, "PACKAGE", "tuner-test-no-such-distribution")
    est = get_estimator("aisimulate").estimate(_req())
    assert not est.feasible and not est.predicted
    assert "pip install 'tuner[simulate]'" in est.unsupported
    assert "https://pypi.nvidia.com" in est.unsupported
    assert "aiconfigurator-core" in est.unsupported  # why it cannot sit beside the estimate extra


def test_engine_defaults_and_client_concurrency(package_dir):
    sim = aisim.simulation_config(_req(concurrency=64), package_dir)
    engine = sim.config["engine"]
    assert (engine["mode"], engine["hardware"], engine["backend"]) == ("aggregated", "h200_sxm",
                                                                        "vllm")
    assert engine["enable_chunked_prefill"] is True
    # vLLM on a >= 70 GiB GPU other than an A100: 1024 sequences, 8192 batched tokens.
    assert _worker(sim)["scheduler"] == {"max_batched_tokens": 8192, "max_sequences": 1024}
    assert _worker(sim)["parallelism"] == {"replicas": 1, "tensor": 1}
    assert "kv_cache" not in _worker(sim)  # AISimulate's own memory fraction for the engine
    assert not {"gemm_quant_mode", "kvcache_quant_mode", "context_length"} & set(engine)
    assert sim.config["traffic"] == {
        "source": {"type": "synthetic", "input_tokens": 1024, "output_tokens": 128},
        "load": {"type": "concurrency", "concurrency": 64},
        "stop": {"requests": aisim.WAVES * 64}}
    assert any(n.startswith("engine defaults: ") for n in sim.notes)


def test_without_a_client_cap_the_engine_limit_is_the_concurrency(package_dir):
    sim = aisim.simulation_config(_req("sglang", concurrency=None, max_num_seqs=96), package_dir)
    assert sim.config["traffic"]["load"]["concurrency"] == 96 == sim.concurrency
    assert _worker(sim)["scheduler"]["max_sequences"] == 96


def test_knobs_map_to_their_fields(package_dir):
    sim = aisim.simulation_config(_req(max_num_seqs=128, max_num_tokens=4096, tensor_parallel=2,
                                       gpu_memory_utilization=0.85, chunked_prefill=False,
                                       max_seq_len=4096), package_dir)
    engine = sim.config["engine"]
    assert _worker(sim)["scheduler"] == {"max_batched_tokens": 4096, "max_sequences": 128}
    assert _worker(sim)["parallelism"]["tensor"] == 2
    assert _worker(sim)["kv_cache"] == {"capacity": {"type": "default", "memory_fraction": 0.85}}
    assert engine["enable_chunked_prefill"] is False and engine["context_length"] == 4096
    assert not any(n.startswith("engine defaults") for n in sim.notes)


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_online_fp8_and_fp8_kv_use_the_aic_mode_table(package_dir, engine):
    sim = aisim.simulation_config(_req(engine, quantization="fp8", kv_cache_dtype="fp8"),
                                  package_dir)
    online = engine_modes().online_gemm[engine]["fp8"]
    kv = engine_modes().kv_cache[engine]["fp8"]
    assert sim.config["engine"]["gemm_quant_mode"] == online.modes[0]
    assert sim.config["engine"]["kvcache_quant_mode"] == kv.kvcache
    assert sim.config["engine"].get("fmha_quant_mode") == kv.fmha
    assert f"online fp8: {online.scheme}" in sim.notes


def test_fp8_below_sm89_is_weight_only(package_dir):
    sim = aisim.simulation_config(_req(gpu="a100-sxm-80gb", quantization="fp8"), package_dir)
    assert sim.config["engine"]["gemm_quant_mode"] == "int8_wo"
    # the A100 keeps vLLM's small defaults
    assert _worker(sim)["scheduler"] == {"max_batched_tokens": 2048, "max_sequences": 256}


def test_a_checkpoint_decides_its_mode(package_dir, tmp_path):
    ckpt = tmp_path / "Qwen3-32B-FP8"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"quantization_config": {
        "quant_method": "fp8", "weight_block_size": [128, 128]}}))
    req = EstimateRequest(engine="vllm", knobs={"quantization": "fp8"}, model="Qwen/Qwen3-32B",
                          checkpoint=str(ckpt), input_len=1024, output_len=128, gpu="h200-141gb")
    assert aisim.simulation_config(req, package_dir).config["engine"]["gemm_quant_mode"] \
        == "fp8_block"


def test_a_local_model_folder_is_passed_by_path(package_dir, tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    (model / "config.json").write_text("{}")
    req = EstimateRequest(engine="vllm", knobs={}, model=str(model), input_len=8, output_len=8,
                          gpu="h200-141gb")
    assert aisim.simulation_config(req, package_dir).config["engine"]["model"] == str(model)


@pytest.mark.parametrize("req,why", [
    (_req("transformers"), "not 'transformers'"),
    (_req(gpu="a100-sxm-40gb"), "40 GB"),
    (_req(gpu="rtx-4090"), "no AISimulate system for GPU 'rtx-4090'"),
    (_req(speculative="ngram"), "does not model the knob(s) speculative"),
    (_req(cuda_graphs=False), "cuda_graphs=False"),
    (_req(max_seq_len=512), "max_seq_len 512 < input+output (1152)"),
    (_req(gpu="b200"), "no system 'b200_sxm'"),  # not in the stand-in package
])
def test_no_mapping_is_unsupported(package_dir, req, why):
    with pytest.raises(_Unsupported) as exc:
        aisim.simulation_config(req, package_dir)
    assert why in str(exc.value)


def test_the_config_is_plain_yaml(package_dir):
    sim = aisim.simulation_config(_req(quantization="fp8", kv_cache_dtype="fp8"), package_dir)
    assert yaml.safe_load(yaml.safe_dump(sim.config)) == sim.config


def test_the_command_asks_for_the_engine_stack_and_a_json_summary(tmp_path):
    cmd = aisim.command(tmp_path / "p.yaml", tmp_path / "out")
    assert Path(cmd[0]).name == "aisimulate"
    assert cmd[1:] == ["predict", "--stack", "engine", "--config", str(tmp_path / "p.yaml"),
                       "--output-dir", str(tmp_path / "out"), "--format", "json"]


def _summary(**over) -> dict:
    s = {"num_requests": 192, "completed_requests": 192, "request_throughput_rps": 4.0,
         "output_throughput_tok_s": 512.0, "mean_ttft_ms": 250.0, "mean_tpot_ms": 20.0,
         "num_tpot_samples": 192}
    return {**s, **over}


def test_summary_to_estimate(package_dir):
    req = _req(concurrency=64)
    sim = aisim.simulation_config(req, package_dir)
    est = aisim.estimate_from_summary(_summary(), req, sim, "src")
    assert est.predicted
    assert est.total_tok_s == pytest.approx(4.0 * (1024 + 128))
    assert (est.output_tok_s, est.ttft_ms, est.tpot_ms, est.batch) == (512.0, 250.0, 20.0, 64)
    assert est.notes[0] == f"concurrency 64, {sim.requests} requests simulated"


def test_the_batch_is_capped_by_max_num_seqs(package_dir):
    req = _req(concurrency=400, max_num_seqs=256)
    est = aisim.estimate_from_summary(_summary(), req, aisim.simulation_config(req, package_dir),
                                      "src")
    assert est.batch == 256


def test_incomplete_and_empty_runs(package_dir):
    req = _req(concurrency=64)
    sim = aisim.simulation_config(req, package_dir)
    part = aisim.estimate_from_summary(_summary(completed_requests=100), req, sim, "src")
    assert part.predicted and any(f"100 of {sim.requests}" in n for n in part.notes)
    none = aisim.estimate_from_summary(_summary(completed_requests=0), req, sim, "src")
    assert not none.predicted and "completed none" in none.unsupported
    broken = aisim.estimate_from_summary({"completed_requests": 5}, req, sim, "src")
    assert not broken.predicted and "request_throughput_rps" in broken.unsupported
    one_token = aisim.estimate_from_summary(_summary(num_tpot_samples=0), req, sim, "src")
    assert one_token.tpot_ms is None


def test_without_a_mean_tpot_the_mean_itl_stands_in(package_dir):
    req = _req(concurrency=64)
    sim = aisim.simulation_config(req, package_dir)
    summary = {k: v for k, v in _summary(mean_itl_ms=23.0).items() if k != "mean_tpot_ms"}
    est = aisim.estimate_from_summary(summary, req, sim, "src")
    assert est.tpot_ms == 23.0 and any("inter-token" in n for n in est.notes)


@pytest.mark.skipif(find_spec("aisimulate") is None, reason=SKIP_REAL)
def test_simulates_for_real():
    """The user guide's first example's deployment (docs/cli/user-guide.md section 4: one H200,
    vLLM); more requests in flight give more throughput and a longer TTFT."""
    est = get_estimator("aisimulate")
    low = est.estimate(_req(concurrency=1, max_num_seqs=256))
    high = est.estimate(_req(concurrency=32, max_num_seqs=256))
    assert low.predicted, low.unsupported
    assert high.predicted, high.unsupported
    assert "h200_sxm/vllm" in high.source
    assert 0 < low.output_tok_s < high.output_tok_s
    assert 0 < low.ttft_ms <= high.ttft_ms
    assert low.tpot_ms > 0 and high.batch == 32
