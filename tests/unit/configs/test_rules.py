"""Capability and version rules: the condition language, every rule the issue names, learned keys."""

import json
from dataclasses import replace

import pytest

from tuner.configs.rules import (
    UNSUPPORTED_VALUE,
    check,
    covered_by,
    describe_key,
    first_violation,
    learned_key,
    pruned_regions,
    workload_facts,
)
from tuner.engines.conditions import UNKNOWN, compile_condition, evaluate, render_reason
from tuner.engines.hardware import Hardware, profile
from tuner.engines.model_config import read_model_config
from tuner.errors import InputError
from tuner.space import Workload, load_space, space_from_dict

A100 = profile("a100-sxm-80gb")
H100 = profile("h100-sxm-80gb")
L40S = profile("l40s")
H100X8 = replace(H100, count=8)
T4 = Hardware(name="t4", kind="gpu", device_key="sm75", gpu_name="Tesla T4",
              compute_capability="7.5", memory_mib=15360, count=1, source="profile")
CPU_AVX2 = profile("cpu-avx2")


@pytest.fixture(scope="module")
def a100_space():
    return load_space("a100-throughput")


def ids(verdicts):
    return [v.rule_id for v in verdicts]


def ev(text, **ctx):
    return evaluate(compile_condition(text), ctx)


# ---- the language ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("knobs.a < knobs.b", True),
    ("knobs.a > 3 and knobs.b == 8", False),
    ("1 < knobs.a < 5", True),
    ("knobs.name in ('x', 'y')", True),
    ("'avx512f' not in hw.cpu_flags", True),
    ("knobs.b % knobs.a != 0", False),
    ("-knobs.a + 10 * 2 // 3 == 4", True),
    ("not (knobs.a == 2)", False),
    ("known(knobs.a) and not known(knobs.zzz)", True),
    ("default(knobs.zzz, 7) == 7 and default(knobs.a, 7) == 2", True),
])
def test_language_on_known_values(text, expected):
    assert ev(text, knobs={"a": 2, "b": 8, "name": "x"}, hw={"cpu_flags": ("avx2",)}) is expected


def test_missing_facts_make_conditions_unknown_not_false():
    ctx = {"knobs": {"a": 2, "u": UNKNOWN}, "hw": {}}
    assert ev("hw.sm < 89", **ctx) is UNKNOWN                    # no GPU facts: cannot say
    assert ev("not (hw.sm < 89)", **ctx) is UNKNOWN
    assert ev("hw.sm < 89 and knobs.a == 3", **ctx) is False      # a known False decides `and`
    assert ev("hw.sm < 89 or knobs.a == 2", **ctx) is True        # a known True decides `or`
    assert ev("known(knobs.u)", **ctx) is UNKNOWN                 # undecided is not "unset"
    assert ev("default(knobs.u, 1) == 1", **ctx) is UNKNOWN
    assert ev("knobs.a in (2, knobs.u)", **ctx) is True           # a known member decides
    assert ev("knobs.a in (3, knobs.u)", **ctx) is UNKNOWN
    assert ev("knobs.a % 0 == 0", **ctx) is UNKNOWN


def test_versions_compare_as_versions():
    from packaging.version import Version
    ctx = {"engine": {"version": Version("0.11.0")}}
    assert ev('engine.version < "0.12"', **ctx) is True
    assert ev('engine.version >= "0.9.2"', **ctx) is True      # strings would say "0.11" < "0.9"
    assert ev('engine.version < "0.12"', engine={"version": Version("0.32.0+cpu")}) is False


@pytest.mark.parametrize("text, problem", [
    ("__import__('os').system('id')", "only known"),
    ("knobs.a.__class__", "bad attribute"),
    ("open('/etc/passwd')", "only known"),
    ("secrets.x == 1", "unknown name"),
    ("[x for x in knobs]", "ListComp"),
    ("knobs.a if knobs.b else 1", "IfExp"),
    ("lambda: 1", "Lambda"),
    ("knobs.a ==", "cannot parse"),
    ("known(knobs.a, knobs.b)", "only known"),
    ("known == 1", "must be called"),
    ("knobs['a'] == 1", "Subscript"),
    ("b'x' == knobs.a", "constant"),
])
def test_anything_outside_the_language_is_refused(text, problem):
    with pytest.raises(InputError, match=problem):
        compile_condition(text, "test-rule")


def test_a_rule_with_bad_syntax_fails_when_the_engine_file_loads():
    from tuner.engines.spec import EngineSpec
    with pytest.raises(Exception, match="unknown name"):
        EngineSpec.model_validate({"name": "x", "display_name": "X", "command": ["x"], "rules": [
            {"id": "bad", "when": "gpu.sm < 80", "reason": "r", "source": "s"}]})


def test_type_errors_in_a_rule_name_the_rule():
    with pytest.raises(InputError, match="rule r1"):
        evaluate(compile_condition("knobs.a < 'x'"), {"knobs": {"a": 1}}, "r1")


def test_reason_fills_names_and_says_unset():
    ctx = {"knobs": {"a": 4}, "hw": {"sm": 80}}
    assert render_reason("a={knobs.a} b={knobs.b} sm={hw.sm} {not.a.ref", ctx) == \
        "a=4 b=unset sm=80 {not.a.ref"


# ---- workload facts ----------------------------------------------------------------------------

def test_longest_prompt_of_each_dataset():
    assert workload_facts(Workload(dataset="random", random_input_len=1000, random_range_ratio=0.1,
                                   random_output_len=100, random_prefix_len=24, num_prompts=100)) == {
        "dataset": "random", "max_prompt_len": 1124, "num_prompts": 100,
        "max_total_len": 1124 + 111}  # ceil(100 * 1.1) is 111 in floats, in vLLM's sampler too
    sharegpt = Workload(dataset="sharegpt", dataset_path="x.json")
    assert workload_facts(sharegpt)["max_prompt_len"] == 1024          # the sampler's filter
    assert workload_facts(sharegpt)["max_total_len"] == 2048


# ---- the rules the issue names -----------------------------------------------------------------

def test_trtllm_fp8_block_scale_needs_sm89_and_up(a100_space):
    v = first_violation("trtllm", {"quantization": "fp8"}, hardware=A100, space=a100_space)
    assert v.rule_id == "trtllm-fp8-block-scale-sm" and "SM 80" in v.reason
    assert "fp8BlockScalingGemm" in v.source
    for hw in (H100, L40S):
        assert first_violation("trtllm", {"quantization": "fp8"}, hardware=hw, space=a100_space) is None


def test_trtllm_cannot_load_autoawq(a100_space):
    for hw in (A100, H100):
        v = first_violation("trtllm", {"quantization": "awq"}, hardware=hw, space=a100_space)
        assert v.rule_id == "trtllm-autoawq-checkpoint"


def test_trtllm_awq_from_a_modelopt_checkpoint_is_allowed(tmp_path, a100_space):
    ckpt = tmp_path / "qwen-awq-modelopt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"num_attention_heads": 40}))
    (ckpt / "hf_quant_config.json").write_text("{}")
    space = _with_model(a100_space, variants={"awq": str(ckpt)})
    assert first_violation("trtllm", {"quantization": "awq"}, hardware=H100, space=space) is None


def test_trtllm_quantization_without_checkpoint_is_unsupported(a100_space):
    space = _with_model(a100_space, variants={})
    v = first_violation("trtllm", {"quantization": "fp8"}, hardware=H100, space=space)
    assert v.rule_id == UNSUPPORTED_VALUE and "model.variants" in v.reason


def test_vllm_fp8_below_sm89_is_allowed_but_annotated(a100_space):
    verdicts = check("vllm", {"quantization": "fp8"}, hardware=A100, space=a100_space)
    assert [(v.rule_id, v.severity) for v in verdicts] == [("vllm-fp8-weight-only", "note")]
    assert check("vllm", {"quantization": "fp8"}, hardware=H100, space=a100_space) == []
    # Below SM 75 nothing runs it; SM 75-79 only after 0.11.
    assert first_violation("vllm", {"quantization": "fp8"}, hardware=T4, space=a100_space,
                           engine_version="0.11.0").rule_id == "vllm-fp8-min-capability"
    assert first_violation("vllm", {"quantization": "fp8"}, hardware=T4, space=a100_space,
                           engine_version="0.33.0") is None


def test_vllm_batched_tokens_at_least_max_num_seqs_when_both_set(a100_space):
    kw = {"hardware": A100, "space": a100_space}
    assert first_violation("vllm", {"max_num_tokens": 128, "max_num_seqs": 256}, **kw).rule_id == \
        "vllm-mnbt-lt-max-num-seqs"
    assert first_violation("vllm", {"max_num_tokens": 128}, **kw) is None  # vLLM clamps max_num_seqs
    assert first_violation("vllm", {"max_num_tokens": 256, "max_num_seqs": 256}, **kw) is None


def test_vllm_batched_tokens_at_least_max_model_len_without_chunked_prefill(a100_space):
    knobs = {"max_num_tokens": 2048, "max_seq_len": 4096, "chunked_prefill": False}
    kw = {"hardware": A100, "space": a100_space}
    assert first_violation("vllm", knobs, **kw).rule_id == "vllm-mnbt-lt-max-model-len"
    assert first_violation("vllm", knobs, engine_version="0.32.0+cpu", **kw).rule_id == \
        "vllm-mnbt-lt-max-model-len"
    # 0.11 ignores --no-enable-chunked-prefill: it starts (with chunked prefill on), annotated.
    on_011 = check("vllm", knobs, engine_version="0.11.0", **kw)
    assert ids(on_011) == ["vllm-0.11-ignores-no-chunked-prefill"]
    assert first_violation("vllm", {**knobs, "chunked_prefill": True}, **kw) is None
    assert first_violation("vllm", {**knobs, "max_num_tokens": 4096}, **kw) is None


def test_vllm_max_model_len_defaults_to_the_models(tiny_space):
    """Unset max_seq_len means the model's max_position_embeddings (4096 for the tiny model)."""
    knobs = {"max_num_tokens": 2048, "chunked_prefill": False}
    assert first_violation("vllm", knobs, hardware=CPU_AVX2, space=tiny_space).rule_id == \
        "vllm-mnbt-lt-max-model-len"
    assert first_violation("vllm", {**knobs, "max_num_tokens": 4096}, hardware=CPU_AVX2,
                           space=tiny_space) is None


def test_vllm_tensor_parallel_must_divide_heads(tiny_space):
    kw = {"hardware": H100X8, "space": tiny_space}
    assert first_violation("vllm", {"tensor_parallel": 3}, **kw).rule_id == "vllm-tp-divides-heads"
    assert first_violation("vllm", {"tensor_parallel": 2}, **kw) is None
    assert first_violation("vllm", {"tensor_parallel": 4}, hardware=H100, space=tiny_space).rule_id \
        == "vllm-tp-dp-exceeds-gpus"


def test_vllm_kv_heads_must_split_or_replicate(tmp_path):
    """48 heads, 8 KV heads: tp 3 and 6 divide the heads but cannot share out the KV heads; tp 16
    replicates each KV head on two GPUs (Qwen3Attention asserts both ways)."""
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 48,
                                                      "num_key_value_heads": 8}))
    space = space_from_dict({"name": "gqa", "model": {"path": str(tmp_path)}, "engines": {"vllm": {}}})
    kw = {"hardware": replace(H100, count=16), "space": space}
    for tp in (3, 6):
        v = first_violation("vllm", {"tensor_parallel": tp}, **kw)
        assert v.rule_id == "vllm-tp-divides-kv-heads" and f"KV heads (8) and tensor_parallel ({tp})" \
            in v.reason
    for tp in (1, 2, 4, 8, 16):
        assert first_violation("vllm", {"tensor_parallel": tp}, **kw) is None


@pytest.mark.parametrize("knobs, gpus, pruned", [
    ({"tensor_parallel": 2, "data_parallel": 2}, 2, True),
    ({"tensor_parallel": 1, "data_parallel": 2}, 2, False),
    ({"tensor_parallel": 2}, 2, False),
    ({"data_parallel": 2}, 1, True),
    ({"tensor_parallel": 2, "data_parallel": 1}, 1, True),
    ({}, 1, False),
    ({"tensor_parallel": 2, "data_parallel": 2}, 4, False),
])
def test_vllm_tp_times_dp_must_fit_the_gpus(tiny_space, knobs, gpus, pruned):
    v = first_violation("vllm", knobs, hardware=replace(H100, count=gpus), space=tiny_space)
    assert (v.rule_id if v else None) == ("vllm-tp-dp-exceeds-gpus" if pruned else None)
    if pruned:
        assert f"more than the {gpus} GPU(s) here" in v.reason


def test_data_parallel_alone_prunes_a_region_whatever_tp_is(tiny_space):
    """dp 2 on one GPU fails for every tensor_parallel: tune plan can say so before tp is chosen."""
    knobs = {"tensor_parallel": UNKNOWN, "data_parallel": 2}
    assert first_violation("vllm", knobs, hardware=H100, space=tiny_space).rule_id == \
        "vllm-tp-dp-exceeds-gpus"
    assert first_violation("vllm", {**knobs, "data_parallel": 1}, hardware=H100, space=tiny_space) \
        is None


def test_heads_rule_is_silent_without_a_model_config(a100_space, monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))  # Qwen/Qwen3-14B is not cached: unknown heads
    read_model_config.cache_clear()
    assert first_violation("vllm", {"tensor_parallel": 3}, hardware=H100X8, space=a100_space) is None


def test_model_config_is_read_from_the_hf_hub_cache(monkeypatch, tmp_path, a100_space):
    snap = tmp_path / "models--Qwen--Qwen3-14B" / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"num_attention_heads": 40,
                                                  "max_position_embeddings": 40960}))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    read_model_config.cache_clear()
    assert first_violation("vllm", {"tensor_parallel": 3}, hardware=H100X8, space=a100_space).rule_id \
        == "vllm-tp-divides-heads"
    assert first_violation("vllm", {"max_seq_len": 65536}, hardware=H100, space=a100_space).rule_id \
        == "vllm-max-model-len-over-model"
    read_model_config.cache_clear()


def test_trtllm_prompt_longer_than_max_num_tokens_without_chunked_prefill():
    space = load_space("h200-throughput")  # random 4000 tokens ±10%: prompts up to 4400
    kw = {"hardware": profile("h200-141gb"), "space": space}
    v = first_violation("trtllm", {"max_num_tokens": 4096, "chunked_prefill": False}, **kw)
    assert v.rule_id == "trtllm-prompt-over-max-num-tokens" and "4400" in v.reason
    assert first_violation("trtllm", {"max_num_tokens": 4096}, **kw).rule_id == \
        "trtllm-prompt-over-max-num-tokens"  # chunked prefill is off by default
    assert first_violation("trtllm", {"max_num_tokens": 4096, "chunked_prefill": True}, **kw) is None
    assert first_violation("trtllm", {"max_num_tokens": 8192}, **kw) is None
    assert first_violation("trtllm", {}, **kw) is None  # default 8192


def test_trtllm_sharegpt_prompts_are_checked_against_1024(a100_space):
    kw = {"hardware": A100, "space": a100_space}
    assert first_violation("trtllm", {"max_num_tokens": 512}, **kw).rule_id == \
        "trtllm-prompt-over-max-num-tokens"
    assert first_violation("trtllm", {"max_num_tokens": 1024}, **kw) is None


def test_sglang_kv_dtype_spelling_is_annotated_and_translated(a100_space):
    verdicts = check("sglang", {"kv_cache_dtype": "fp8"}, hardware=H100, space=a100_space)
    assert ids(verdicts) == ["sglang-kv-fp8-spelling"] and verdicts[0].severity == "note"
    v = first_violation("sglang", {"kv_cache_dtype": "fp8_e5m2"}, hardware=H100, space=a100_space)
    assert v.rule_id == UNSUPPORTED_VALUE and "fp8→fp8_e4m3" in v.reason


def test_sglang_chunked_prefill_off_and_max_num_tokens_clash(a100_space):
    v = first_violation("sglang", {"chunked_prefill": False, "max_num_tokens": 4096},
                        hardware=A100, space=a100_space)
    assert v.rule_id == "sglang-chunked-prefill-size-clash"


@pytest.mark.parametrize("engine, value, rule", [
    ("vllm", 1.2, "vllm-gpu-memory-utilization-range"),
    ("vllm", 0.0, "vllm-gpu-memory-utilization-range"),
    ("sglang", 1.5, "sglang-mem-fraction-range"),
    ("trtllm", 1.01, "trtllm-free-memory-fraction-range"),
])
def test_memory_fraction_must_be_at_most_one(engine, value, rule, a100_space):
    assert first_violation(engine, {"gpu_memory_utilization": value}, hardware=H100,
                           space=a100_space).rule_id == rule
    assert first_violation(engine, {"gpu_memory_utilization": 0.9}, hardware=H100,
                           space=a100_space) is None


def test_cpu_rules(tiny_space):
    kw = {"hardware": CPU_AVX2, "space": tiny_space}
    assert first_violation("vllm", {"kv_cache_dtype": "fp8"}, **kw).rule_id == "vllm-cpu-fp8-kv-cache"
    avx512 = replace(CPU_AVX2, cpu_flags=("avx2", "avx512f"))
    assert first_violation("vllm", {"kv_cache_dtype": "fp8"}, hardware=avx512, space=tiny_space) is None
    # A bare "cpu" profile knows no flags: the rule stays silent instead of guessing.
    assert first_violation("vllm", {"kv_cache_dtype": "fp8"}, hardware=profile("cpu"),
                           space=tiny_space) is None
    assert first_violation("vllm", {"quantization": "fp8"}, **kw).rule_id == "vllm-cpu-online-fp8"
    assert first_violation("vllm", {"quantization": "awq"}, **kw).rule_id == \
        "vllm-awq-needs-awq-checkpoint"  # the tiny model's config.json says it is not AWQ


def test_engines_that_need_a_gpu(a100_space):
    assert first_violation("trtllm", {}, hardware=CPU_AVX2, space=a100_space).rule_id == \
        "trtllm-needs-gpu"
    assert first_violation("sglang", {}, hardware=CPU_AVX2, space=a100_space).rule_id == \
        "sglang-needs-gpu"


def test_transformers_rules(tiny_space):
    kw = {"hardware": CPU_AVX2, "space": tiny_space}
    assert first_violation("transformers", {"cb_num_blocks": 16}, **kw).rule_id == \
        "transformers-cb-knobs-need-cb"
    assert first_violation("transformers", {"continuous_batching": True, "cb_num_blocks": 16},
                           **kw) is None
    assert first_violation("transformers", {"continuous_batching": True, "cb_use_cuda_graph": True},
                           **kw).rule_id == "transformers-cuda-graph-on-cpu"
    assert ids(check("transformers", {}, **kw)) == ["transformers-no-continuous-batching"]


def test_omitted_knobs_run_at_engine_defaults_but_a_checkpoint_still_loads(a100_space):
    knobs = {"quantization": "awq", "max_num_tokens": 512, "chunked_prefill": False}
    omit = frozenset(knobs)
    # The baseline omits every flag, yet loads the AWQ checkpoint: that is what the rules see.
    assert first_violation("trtllm", knobs, hardware=H100, space=a100_space, omit=omit).rule_id == \
        "trtllm-autoawq-checkpoint"
    assert first_violation("trtllm", {**knobs, "quantization": "none"}, hardware=H100,
                           space=a100_space, omit=omit) is None


def test_check_lists_prunes_before_notes(a100_space):
    verdicts = check("vllm", {"quantization": "fp8", "max_num_tokens": 64, "max_num_seqs": 128},
                     hardware=A100, space=a100_space)
    assert [v.severity for v in verdicts] == ["prune", "note"]


# ---- regions, for `tune plan` ------------------------------------------------------------------

def test_a100_regions_are_exactly_trtllm_fp8_and_awq(a100_space):
    regions = pruned_regions(a100_space, A100)
    found = {(r.engine, tuple(r.assignment.items()), v.rule_id) for r in regions for v in r.verdicts}
    assert found == {("trtllm", (("quantization", "fp8"),), "trtllm-fp8-block-scale-sm"),
                     ("trtllm", (("quantization", "awq"),), "trtllm-autoawq-checkpoint")}
    assert pruned_regions(a100_space, H100) == [
        r for r in pruned_regions(a100_space, H100) if r.assignment == {"quantization": "awq"}]


def test_regions_respect_conditional_params():
    """SGLang max_num_tokens exists only with chunked prefill, so no clash region is reported."""
    space = load_space("a100-throughput")
    assert not [r for r in pruned_regions(space, A100) if r.engine == "sglang"]


def test_regions_with_two_params_and_whole_engines():
    space = load_space("h200-throughput")
    regions = {(r.engine, tuple(sorted(r.assignment.items()))): ids(r.verdicts)
               for r in pruned_regions(space, profile("h200-141gb"))}
    assert regions[("trtllm", (("chunked_prefill", False), ("max_num_tokens", 2048)))] == \
        ["trtllm-prompt-over-max-num-tokens"]
    assert regions[("trtllm", (("quantization", "awq"),))] == ["trtllm-autoawq-checkpoint"]
    cpu = {r.engine: r.assignment for r in pruned_regions(space, CPU_AVX2) if not r.assignment}
    assert set(cpu) == {"trtllm", "sglang"}  # every config of these engines


# ---- learned infeasibility ---------------------------------------------------------------------

def test_learned_key_covers_siblings_only():
    gen = ["engine", "quantization", "device"]
    key = learned_key(gen, "trtllm", {"quantization": "fp8", "max_num_tokens": 8192}, "sm80")
    assert describe_key(key) == "device=sm80, engine=trtllm, quantization=fp8"
    learned = {key: 7}
    sibling = {"quantization": "fp8", "max_num_tokens": 16384, "chunked_prefill": True}
    assert covered_by(learned, "trtllm", sibling, "sm80") == (key, 7)
    assert covered_by(learned, "trtllm", {"quantization": "none"}, "sm80") is None
    assert covered_by(learned, "trtllm", sibling, "sm90") is None       # other hardware
    assert covered_by(learned, "vllm", sibling, "sm80") is None         # other engine


def test_learned_keys_of_different_shapes_and_unset_knobs():
    awq = learned_key(["engine", "quantization"], "trtllm", {"quantization": "awq"}, "sm90")
    kv = learned_key(["engine", "kv_cache_dtype", "device"], "vllm", {}, "cpu-avx2")
    assert json.loads(kv) == {"device": "cpu-avx2", "engine": "vllm", "kv_cache_dtype": None}
    learned = {awq: 3, kv: 5}
    assert covered_by(learned, "trtllm", {"quantization": "awq"}, "sm100") == (awq, 3)  # any device
    assert covered_by(learned, "vllm", {"max_num_seqs": 4}, "cpu-avx2") == (kv, 5)
    assert covered_by(learned, "vllm", {"kv_cache_dtype": "fp8"}, "cpu-avx2") is None
    assert learned_key([], "vllm", {}, "sm80") is None


def test_a_corrupt_stored_key_is_an_input_error():
    with pytest.raises(InputError, match="not valid JSON"):
        covered_by({"engine=vllm": 1}, "vllm", {}, "sm80")


# ---- helpers -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_space(tmp_path_factory):
    """A local model dir with the tiny model's config (heads 4, 4096 positions), no weights."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "config.json").write_text(json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "num_attention_heads": 4, "num_key_value_heads": 2,
        "max_position_embeddings": 4096}))
    return space_from_dict({"name": "tiny", "model": {"path": str(d)},
                            "engines": {"vllm": {}, "transformers": {}}})


def _with_model(space, **update):
    return space.model_copy(update={"model": space.model.model_copy(update=update)})
