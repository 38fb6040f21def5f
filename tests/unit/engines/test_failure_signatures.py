"""Failure classification for SGLang and TensorRT-LLM (texts from the engines' source, cited by each
signature's source in engines/*.yaml) and
transformers serve (lines of real logs captured on the CPU machine)."""

import pytest

from tuner.engines.failures import classify_exit
from tuner.engines.spec import load_engine

GENERAL = ("engine", "quantization", "device")


def classify(engine: str, text: str):
    return classify_exit(load_engine(engine), f"INFO starting\n{text}\nINFO shutting down\n", 1)


@pytest.mark.parametrize("text, cls, generalises", [
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
     "self.server_args.mem_fraction_static=0.55", "kv-cache-too-small", ()),
    ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
     "mem_fraction_static=0.6", "kv-cache-too-small", ()),
    ("Exception: Capture cuda graph failed: CUDA out of memory.\nPossible solutions:\n1. set "
     "--mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)", "out-of-memory", ()),
    ("AssertionError: Memory pool size is too small", "kv-cache-too-small", ()),
    ("ValueError: The quantization method fp8 is not supported for the current GPU. Minimum "
     "capability: 80. Current capability: 75.", "unsupported-quantization", GENERAL),
    ("Health check failed. Server couldn't get a response from detokenizer for last 20 seconds.",
     "crashed", ()),
    ("Initialization failed. warmup error: Traceback", "crashed", ()),
    ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): address "
     "already in use", "port-in-use", ()),
    ("ValueError: User-specified context_length (65536) is greater than the derived context_length "
     "(40960). ... To allow overriding this maximum, set the env var "
     "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "invalid-config", ()),
    ("launch_server.py: error: ambiguous option: --cuda-graph-max-bs could match "
     "--cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill", "invalid-config", ()),
    ("launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'fp8'", "invalid-config", ()),
])
def test_sglang_documented_texts(text, cls, generalises):
    failure = classify("sglang", text)
    assert failure.failure_class == cls
    assert set(failure.generalises_on) == set(generalises)


@pytest.mark.parametrize("text, cls, generalises", [
    ("RuntimeError: Unsupported SM version for FP8 block scaling GEMM", "unsupported-quantization",
     GENERAL),
    ("  File \"tensorrt_llm/_torch/modules/linear.py\", in load_weights_vanilla_helper\n"
     "    weight = weights[0]['weight']\nKeyError: 'weight'", "unsupported-quantization",
     ("engine", "quantization")),
    ("    assert \"weight\" in weights[0]\nAssertionError", "unsupported-quantization",
     ("engine", "quantization")),
    ("RuntimeError: Failed to bind socket to localhost:8000: [Errno 98] Address already in use",
     "port-in-use", ()),
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB", "out-of-memory", ()),
    ("pydantic_core._pydantic_core.ValidationError: 1 validation error for TorchLlmArgs\n"
     "kv_cache_config.free_gpu_memory_fractionn\n  Extra inputs are not permitted", "invalid-config", ()),
    ("ValueError: No GPU devices found on the node", "unsupported-hardware", ("engine", "device")),
    ("ValueError: The sum of prompt length (9000), query length (0) should not exceed max_num_tokens "
     "(8192)", "requests-failed", ()),
    ("Error: No such option: --max-num-seqs", "invalid-config", ()),
])
def test_trtllm_documented_texts(text, cls, generalises):
    failure = classify("trtllm", text)
    assert failure.failure_class == cls
    assert set(failure.generalises_on) == set(generalises)


# Lines from real transformers serve 5.24 runs on this CPU machine (tiny model, 2026-11-30).
@pytest.mark.parametrize("text, cls", [
    ("Usage: transformers serve [OPTIONS] [FORCE_MODEL]\nTry 'transformers serve -h' for help.\n"
     "Error: No such option '--bogus-flag'.", "invalid-config"),
    ("ValueError: Unsupported attention implementation: 'flash_attn_9'. Must be one of {'sdpa', "
     "'flash_attention_2', 'eager', 'flash_attention_3', 'flex_attention'} or a hub kernel (e.g. "
     "'kernels-community/flash-attn2').", "invalid-config"),
    ("INFO:     Application startup complete.\nERROR:    [Errno 98] error while attempting to bind on "
     "address ('127.0.0.1', 50113): address already in use\nINFO:     Waiting for application "
     "shutdown.", "port-in-use"),
    ("{\"detail\":\"Unexpected fields in the request: {'ignore_eos', 'repetition_penalty'}\"}",
     "requests-failed"),
])
def test_transformers_real_log_lines(text, cls):
    failure = classify("transformers", text)
    assert failure.failure_class == cls and failure.evidence


def test_vllm_cpu_hardware_failures_generalise_on_what_they_depend_on():
    fp8_kv = classify("vllm", "NotImplementedError: FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")
    assert set(fp8_kv.generalises_on) == {"engine", "kv_cache_dtype", "device"}
    numa = classify("vllm", "AssertionError: Not enough allowed NUMA nodes to bind threads of 2 local "
                            "CPUWorkers")
    assert set(numa.generalises_on) == {"engine", "tensor_parallel", "device"}


def test_benign_transformers_warning_is_not_the_cause():
    log = ("RuntimeError: model crashed\n"
           "WARNING Ignoring unsupported fields in the request: {'logprobs'}\n")
    failure = classify_exit(load_engine("transformers"), log, 1)
    assert failure.failure_class == "crashed" and failure.evidence == "RuntimeError: model crashed"
