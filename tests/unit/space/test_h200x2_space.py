"""The two-H200 vLLM space (a fixture): it loads, `tune plan` prunes what cannot start on two GPUs
and on one, with the rules' reasons, and the launches carry the parallel flags and the NCCL env."""

import json

import pytest

from tuner.configs.plan import build_plan_report
from tuner.configs.rules import first_violation
from tuner.configs.translate import build_plan
from tuner.engines.hardware import profile
from tuner.engines.model_config import read_model_config
from tuner.engines.spec import load_engine
from tuner.space import load_space, space_from_dict
from tuner.yaml_io import load_yaml
from tests.helpers import SPACES, fixture_space

# Qwen3-14B's published attention shape (engines/models/shapes.yaml)
QWEN3_14B = {"architectures": ["Qwen3ForCausalLM"], "num_attention_heads": 40,
             "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 40960}
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """${TUNER_CACHE} with the Qwen3-14B-shape config.json, so the heads rules know the model."""
    model = tmp_path / "models" / "qwen3-14b-shape"
    model.mkdir(parents=True)
    (model / "config.json").write_text(json.dumps(QWEN3_14B))
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path))
    read_model_config.cache_clear()
    yield tmp_path
    read_model_config.cache_clear()


def _regions(space, gpu):
    return {tuple(sorted(r.assignment.items())): r.verdicts
            for r in build_plan_report(space, profile(gpu), n_samples=0).regions}


def test_the_space_loads_with_the_parallel_knobs(cache):
    s = load_space(fixture_space("h200x2-vllm"))
    params = s.engines["vllm"].params
    assert params["tensor_parallel"].choices == [1, 2] and params["data_parallel"].choices == [1, 2]
    assert params["quantization"].choices == ["none", "fp8"] and s.model.variants == {}  # online FP8
    assert {"max_num_seqs", "max_num_tokens", "chunked_prefill", "gpu_memory_utilization"} <= set(params)
    assert s.objective.metric == "total_tokens_per_gpu_hour"
    assert (s.workload.dataset, s.workload.num_prompts, s.workload.request_rate) == \
        ("sharegpt", 400, float("inf"))
    assert s.workload.dataset_path == "${TUNER_SAMPLES}/sharegpt_small.json"
    assert {b.name: b.params for b in s.baselines} == {"vllm-defaults": {},
                                                      "vllm-tp2-defaults": {"tensor_parallel": 2}}
    assert s.model.resolved_path() == str(cache / "models" / "qwen3-14b-shape")


def test_two_gpus_prune_only_tp_times_dp_over_two(cache):
    regions = _regions(load_space(fixture_space("h200x2-vllm")), "h200-141gb-x2")
    parallel = {k: v for k, v in regions.items()
                if {n for n, _ in k} & {"tensor_parallel", "data_parallel"}}
    (where, verdicts), = parallel.items()
    assert where == (("data_parallel", 2), ("tensor_parallel", 2))
    assert [v.rule_id for v in verdicts] == ["vllm-tp-dp-exceeds-gpus"]
    assert "more than the 2 GPU(s) here" in verdicts[0].reason


def test_one_gpu_prunes_tp2_and_dp2_and_the_tp2_baseline(cache):
    space = load_space(fixture_space("h200x2-vllm"))
    regions = _regions(space, "h200-141gb")
    for where in ((("tensor_parallel", 2),), (("data_parallel", 2),)):
        assert [v.rule_id for v in regions[where]] == ["vllm-tp-dp-exceeds-gpus"]
        assert "more than the 1 GPU(s) here" in regions[where][0].reason
    report = build_plan_report(space, profile("h200-141gb"), n_samples=0)
    by_label = {c.label: c for c in report.engines[0].configs}
    assert by_label["baseline vllm-tp2-defaults"].pruned_by.rule_id == "vllm-tp-dp-exceeds-gpus"
    assert by_label["baseline vllm-defaults"].pruned_by is None


def test_the_heads_rule_prunes_tp_that_does_not_divide_40_heads(cache):
    data, _ = load_yaml(SPACES / "h200x2-vllm.yaml", "space")
    data["engines"]["vllm"]["params"]["tensor_parallel"]["choices"] = [1, 2, 3, 4]
    regions = _regions(space_from_dict(data), "h200-141gb-x4")
    tp3 = regions[(("tensor_parallel", 3),)]  # whatever quantization: there is one checkpoint
    assert [v.rule_id for v in tp3] == ["vllm-tp-divides-heads", "vllm-tp-divides-kv-heads"]
    assert "attention heads (40) are not divisible by tensor_parallel (3)" in tp3[0].reason
    assert (("tensor_parallel", 4),) not in regions  # 40 and 8 both divide by 4


def test_the_argv_has_the_parallel_flags_and_multicast_off(cache):
    space = load_space(fixture_space("h200x2-vllm"))
    knobs = {"tensor_parallel": 2, "data_parallel": 1, "quantization": "fp8", "max_num_seqs": 256,
             "max_num_tokens": 8192, "chunked_prefill": True, "gpu_memory_utilization": 0.9,
             "max_seq_len": 4096}
    assert first_violation("vllm", knobs, hardware=profile("h200-141gb-x2"), space=space) is None
    plan = build_plan(load_engine("vllm"), space.engines["vllm"], space.model, knobs, port=8000)
    argv = plan.argv
    assert argv[0] == str(cache / "engines" / "vllm-0.25.1" / "bin" / "vllm") and argv[1] == "serve"
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--tensor-parallel-size"] == "2" and pairs["--data-parallel-size"] == "1"
    assert pairs["--quantization"] == "fp8" and pairs["--load-format"] == "dummy"
    assert NO_MULTICAST.items() <= plan.env.items()
    assert plan.env["PYTHONPATH"] == str(cache / "engines" / "vllm-0.25.1")
    assert load_engine("vllm").gpus(knobs) == 2


def test_the_defaults_baseline_passes_no_parallel_flag(cache):
    space = load_space(fixture_space("h200x2-vllm"))
    params = space.engines["vllm"].params
    omit = frozenset(params) | {"max_seq_len"}
    knobs = {k: p.default for k, p in params.items() if p.default is not None}
    plan = build_plan(load_engine("vllm"), space.engines["vllm"], space.model, knobs, port=8000,
                      omit=omit)
    assert not {"--tensor-parallel-size", "--data-parallel-size", "--max-model-len"} & set(plan.argv)
    assert load_engine("vllm").gpus(knobs, omit) == 1
