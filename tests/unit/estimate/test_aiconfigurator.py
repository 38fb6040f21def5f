"""The AIConfigurator estimator against the real aiconfigurator-core package (the `estimate` extra)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO
from tuner.errors import InputError
from tuner.estimate import (
    Estimate,
    EstimateRequest,
    get_estimator,
)
from tuner.registry import Registry

pytest.importorskip("aiconfigurator_core", reason="aiconfigurator-core is not installed: "
                    "pip install 'tuner[estimate]'")

# Qwen/Qwen3-14B's config.json, the shape the motivating study served
# (https://docs.gpustack.ai/latest/performance-lab/qwen3-14b/a100).
QWEN3_14B = {
    "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 5120,
    "num_hidden_layers": 40, "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128,
    "intermediate_size": 17408, "vocab_size": 151936, "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16", "tie_word_embeddings": False, "rms_norm_eps": 1e-06,
    "rope_theta": 1000000, "hidden_act": "silu", "attention_bias": False,
}
ENGINES = ("vllm", "sglang", "trtllm")


def _checkpoint(root: Path, name: str, quantization_config: dict | None = None) -> str:
    d = root / name
    d.mkdir()
    cfg = dict(QWEN3_14B)
    if quantization_config:
        cfg["quantization_config"] = quantization_config
    (d / "config.json").write_text(json.dumps(cfg))
    return str(d)


@pytest.fixture(scope="module")
def qwen3_14b(tmp_path_factory) -> str:
    return _checkpoint(tmp_path_factory.mktemp("models"), "Qwen3-14B")


@pytest.fixture(scope="module")
def aic():
    return get_estimator("aiconfigurator")


def _req(model: str, engine: str = "vllm", gpu: str = "a100-sxm-80gb", **knobs) -> EstimateRequest:
    return EstimateRequest(engine=engine, knobs=knobs, model=model, input_len=220, output_len=200,
                           gpu=gpu)


@pytest.mark.parametrize("engine", ENGINES)
def test_predicts_each_engine_on_a100(aic, qwen3_14b, engine):
    est = aic.estimate(_req(qwen3_14b, engine, max_num_seqs=64, max_num_tokens=8192))
    assert est.predicted, est
    assert f"a100_sxm/{engine}" in est.source
    assert 200 < est.output_tok_s < 20000
    # A request is 220 + 200 tokens, of which AIC counts 199 as decode output (the first is TTFT).
    assert est.total_tok_s == pytest.approx(est.output_tok_s * 420 / 199)
    assert est.ttft_ms > 0 and est.tpot_ms > 0
    assert 27.5 < est.memory_gib < 80  # bf16 weights of 14.8 B params, plus KV, below 80 GiB


@pytest.mark.parametrize("engine,cli_output_tok_s", [("vllm", 3014.2), ("sglang", 2554.5),
                                                     ("trtllm", 3108.6)])
def test_matches_the_cli_estimate(aic, qwen3_14b, engine, cli_output_tok_s):
    """`aiconfigurator cli estimate --model-path DIR --system a100_sxm --backend ENGINE --isl 220
    --osl 200 --batch-size 128` of aiconfigurator 0.12.0, DIR holding the config.json above, with
    its default ctx_tokens = isl, gave these; max_num_tokens 220 without chunking is that budget."""
    est = aic.estimate(_req(qwen3_14b, engine, max_num_seqs=128, max_num_tokens=220,
                            chunked_prefill=False))
    assert est.output_tok_s == pytest.approx(cli_output_tok_s, abs=0.1)


@pytest.mark.parametrize("engine,version,cli_output_tok_s", [
    ("vllm", "0.24.0", 1166.8), ("sglang", "0.5.14", 1188.1), ("trtllm", "1.3.0rc20", 1181.6)])
def test_matches_the_cli_estimate_on_h200(aic, engine, version, cli_output_tok_s):
    """`aiconfigurator cli estimate --model-path Qwen/Qwen3-32B --system h200_sxm --isl 1000
    --osl 200 --batch-size 64` of aiconfigurator 0.12.0: the hub id is one of AIC's
    bundled configs, and the data version is the one the CLI picks (its current, not its next)."""
    est = aic.estimate(EstimateRequest(
        engine=engine, knobs={"max_num_seqs": 64, "max_num_tokens": 1000, "chunked_prefill": False},
        model="Qwen/Qwen3-32B", input_len=1000, output_len=200, gpu="h200-141gb"))
    assert f"h200_sxm/{engine} {version}" in est.source
    assert est.output_tok_s == pytest.approx(cli_output_tok_s, abs=0.1)


@pytest.mark.parametrize("engine", ENGINES)
def test_throughput_rises_with_batch(aic, qwen3_14b, engine):
    low, high = (aic.estimate(_req(qwen3_14b, engine, max_num_seqs=b)) for b in (8, 64))
    assert high.output_tok_s > 2 * low.output_tok_s
    assert high.tpot_ms > low.tpot_ms


def test_kv_capacity_caps_the_batch(aic, qwen3_14b):
    tight = aic.estimate(_req(qwen3_14b, max_num_seqs=512, gpu_memory_utilization=0.8))
    roomy = aic.estimate(_req(qwen3_14b, max_num_seqs=512, gpu_memory_utilization=0.95))
    assert tight.predicted and roomy.predicted
    kv_note = [n for n in tight.notes if n.startswith("KV cache holds")]
    assert kv_note and "512 asked" in kv_note[0]
    assert not any(n.startswith("KV cache holds") for n in roomy.notes)
    assert tight.memory_gib < 0.8 * 80 < roomy.memory_gib
    assert tight.batch < 512 == roomy.batch


def test_client_concurrency_caps_the_batch(aic, qwen3_14b):
    capped = aic.estimate(EstimateRequest(engine="vllm", knobs={"max_num_seqs": 256},
                                          model=qwen3_14b, input_len=220, output_len=200,
                                          gpu="a100-sxm-80gb", max_concurrency=32))
    assert capped.batch == 32 and capped.notes[0].startswith("batch 32,")
    assert capped.output_tok_s == pytest.approx(
        aic.estimate(_req(qwen3_14b, max_num_seqs=32)).output_tok_s)


def test_model_too_big_for_the_gpu_does_not_fit(aic):
    """A 70B model in bf16 (about 131 GiB of weights) on one 80 GB A100: infeasible, not unsupported.
    The hub id is one of AIC's bundled configs, so it needs no download."""
    est = aic.estimate(_req("meta-llama/Meta-Llama-3.1-70B", max_num_seqs=64))
    assert not est.feasible and est.unsupported is None
    assert est.notes[0].startswith("does not fit") and est.memory_gib > 120


def test_awq_checkpoint_is_w4a16(aic, qwen3_14b, tmp_path):
    awq = _checkpoint(tmp_path, "Qwen3-14B-AWQ", {"quant_method": "awq", "bits": 4,
                                                  "group_size": 128, "zero_point": True})
    bf16 = aic.estimate(_req(qwen3_14b, "trtllm", max_num_seqs=64))
    est = aic.estimate(EstimateRequest(engine="trtllm", knobs={"max_num_seqs": 64,
                                                                "quantization": "awq"},
                                       model=qwen3_14b, checkpoint=awq, input_len=220,
                                       output_len=200, gpu="a100-sxm-80gb"))
    assert est.predicted and "int4_wo" in " ".join(est.notes)
    assert est.memory_gib < bf16.memory_gib - 15  # 4-bit weights: ~20 GiB less


def test_a_variant_named_for_its_checkpoint_runs_what_the_checkpoint_is(aic, qwen3_14b, tmp_path):
    """`quantization: fp8-checkpoint` names a model variant: its config.json (block-scaled FP8,
    as Qwen's -FP8 checkpoints) decides AIC's mode, fp8_block, not the knob's name."""
    fp8 = _checkpoint(tmp_path, "Qwen3-14B-FP8", {"quant_method": "fp8", "fmt": "e4m3",
                                                  "activation_scheme": "dynamic",
                                                  "weight_block_size": [128, 128]})
    req = EstimateRequest(engine="sglang", knobs={"max_num_seqs": 64, "quantization": "fp8-checkpoint"},
                          model=qwen3_14b, checkpoint=fp8, input_len=220, output_len=200,
                          gpu="h200-141gb")
    est = aic.estimate(req)
    bf16 = aic.estimate(_req(qwen3_14b, "sglang", gpu="h200-141gb", max_num_seqs=64))
    assert est.predicted, est.unsupported
    assert est.memory_gib < bf16.memory_gib - 10  # 8-bit weights: ~14 GiB less
    plain = aic.estimate(EstimateRequest(engine="sglang", knobs={"max_num_seqs": 64,
                                                                 "quantization": "fp8-checkpoint"},
                                         model=qwen3_14b, checkpoint=qwen3_14b, input_len=220,
                                         output_len=200, gpu="h200-141gb"))
    assert "has no AIConfigurator mapping" in plain.unsupported  # a BF16 folder under that name


@pytest.mark.parametrize("gpu,why", [
    ("a100-sxm-40gb", "only the 80 GB A100"),
    ("rtx-4090", "no AIConfigurator system for GPU 'rtx-4090'"),
    ("h100-pcie-80gb", "no vllm performance data for h100_pcie"),
])
def test_unsupported_gpu(aic, qwen3_14b, gpu, why):
    est = aic.estimate(_req(qwen3_14b, gpu=gpu, max_num_seqs=64))
    assert not est.feasible and est.output_tok_s is None
    assert why in est.unsupported


def test_unsupported_engine(aic, qwen3_14b):
    est = aic.estimate(_req(qwen3_14b, "transformers", max_num_seqs=8))
    assert "not 'transformers'" in est.unsupported


@pytest.mark.parametrize("knobs,why", [
    ({"cuda_graphs": False}, "does not model cuda_graphs=False"),
    ({"block_size": 32}, "does not model the knob(s) block_size"),
    ({"kv_cache_dtype": "fp8"}, "context attention data missing"),  # no FP8 KV data for SM80
    ({"quantization": "fp8"},  # W8A16 on SM80
     "no GEMM data for int8_wo in systems/data/a100_sxm/gemm/vllm/0.14.0 (it has bfloat16)"),
    ({"quantization": "awq"}, "name the AWQ checkpoint"),
    ({"quantization": "gptq"}, "quantization='gptq' has no AIConfigurator mapping"),
    ({"max_seq_len": 256}, "requests would be rejected"),
])
def test_unsupported_knob(aic, qwen3_14b, knobs, why):
    est = aic.estimate(_req(qwen3_14b, max_num_seqs=64, **knobs))
    assert not est.feasible and est.total_tok_s is None
    assert why in est.unsupported


def test_neutral_knobs_keep_the_estimate(aic, qwen3_14b):
    plain = aic.estimate(_req(qwen3_14b, max_num_seqs=64))
    same = aic.estimate(_req(qwen3_14b, max_num_seqs=64, cuda_graphs=True, prefix_caching=False,
                             dtype="bfloat16"))
    assert same.output_tok_s == plain.output_tok_s


def test_hybrid_mode_fills_missing_kernels_and_says_so(qwen3_14b):
    est = get_estimator("aiconfigurator-hybrid").estimate(
        _req(qwen3_14b, max_num_seqs=64, quantization="fp8"))
    assert est.predicted and "HYBRID" in est.source


def test_model_that_is_nowhere(aic):
    est = aic.estimate(_req("no-such-org/No-Such-Model", max_num_seqs=8))
    assert "not a local directory" in est.unsupported


def test_estimates_are_cached_per_request(aic, qwen3_14b):
    first = aic.estimate(_req(qwen3_14b, max_num_seqs=48))
    assert aic.estimate(_req(qwen3_14b, max_num_seqs=48)) is first


def test_missing_package_says_how_to_install(qwen3_14b):
    """A Python that cannot import aiconfigurator_core gets an actionable unsupported reason."""
    code = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.startswith('aiconfigurator_core'):\n"
        "            raise ImportError('blocked for this test')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from tuner.estimate import EstimateRequest, get_estimator\n"
        f"r = EstimateRequest(engine='vllm', knobs={{}}, model={qwen3_14b!r}, input_len=10,"
        " output_len=10, gpu='a100-sxm-80gb')\n"
        "print(get_estimator('aiconfigurator').estimate(r).unsupported)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=REPO)
    assert "pip install 'tuner[estimate]'" in out.stdout


def test_unknown_estimator_lists_the_known_ones():
    with pytest.raises(InputError, match="choose one of aiconfigurator, aiconfigurator-hybrid"):
        get_estimator("nope")


def test_register_adds_a_name_once():
    registry = Registry("estimator")

    @registry.register("test-constant")
    class Constant:
        name = "test-constant"

        def estimate(self, req):
            return Estimate.cannot("a test estimator knows nothing", self.name)

    assert registry.get("test-constant")().estimate(_req("m")).unsupported
    with pytest.raises(ValueError, match="registered twice"):
        registry.register("test-constant")(Constant)


def test_request_validates_lengths():
    with pytest.raises(ValueError, match="input_len and output_len"):
        EstimateRequest(engine="vllm", knobs={}, model="m", input_len=0, output_len=1, gpu="g")
