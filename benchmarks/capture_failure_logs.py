"""Capture real engine failure logs for the classification tests (tests/data/logs/).

Each case launches the real engine server of a space with a config it refuses, prints the class the
tuner's signatures give it, and keeps the log's last lines as ``<prefix>-<case>.log``.
Run: .venv/bin/python benchmarks/capture_failure_logs.py                       (vLLM CPU, cpu-smoke)
     python3 -m benchmarks.capture_failure_logs --gpu [CASE ...]                (on the H200 host:
       vLLM 0.25.1 and SGLang 0.5.17 from their folders, h200-vllm / h200-sglang)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.runtime import launcher, procgroup
from tuner.space import load_space

CPU_CASES = {
    "invalid-config-mnbt-lt-max-len": {"max_num_tokens": 256, "chunked_prefill": False, "max_seq_len": 2048},
    "invalid-config-max-len-over-model": {"max_seq_len": 8192},
    "invalid-config-max-num-seqs-0": {"max_num_seqs": 0},
    "unsupported-quantization-awq": {"quantization": "awq"},
    "unsupported-quantization-fp8": {"quantization": "fp8"},
    # Fails only on CPUs without AVX-512/AMX ("FP8 KV cache on CPU requires x86 with AVX-512 or
    # AMX"); on others it starts, and no log is kept.
    "unsupported-hardware-fp8-kv": {"kv_cache_dtype": "fp8"},
}
# On one H200 with the Qwen3-14B shape (28 GiB of BF16 weights): a memory fraction below the
# weights, one that leaves too little KV cache for the model's 40960-token context, and a
# quantization whose config a BF16 checkpoint does not have.
GPU_CASES = {
    "vllm": {
        "out-of-memory": {"gpu_memory_utilization": 0.1},
        "kv-cache-too-small": {"gpu_memory_utilization": 0.22, "max_seq_len": 40960},
        "unsupported-quantization-awq": {"quantization": "awq"},
    },
    "sglang": {
        "out-of-memory": {"gpu_memory_utilization": 0.1},
        "unsupported-quantization-awq": {"quantization": "awq"},
    },
}
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs"
KEEP_LINES = 60
START_S = 300


def capture(space_name: str, engine: str, cases: dict[str, dict], prefix: str, names: list[str]) -> None:
    space = load_space(space_name)
    spec = load_engine(engine)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(cases):
        if name not in cases:
            continue
        plan = build_plan(spec, space.engines[engine], space.model, cases[name], port=procgroup.free_port())
        log = Path(f"/tmp/tuner-capture-{engine}-{name}.log")
        log.unlink(missing_ok=True)
        server = launcher.start(plan, spec, log)
        try:
            launcher.wait_ready(server, START_S)
            print(f"{engine} {name}: became ready on this machine; no log kept", flush=True)
            continue
        except launcher.EngineStartFailed as exc:
            print(f"{engine} {name}: {exc.failure.failure_class}: {exc.failure.evidence[:200]}", flush=True)
        finally:
            server.stop()
        lines = log.read_text(errors="replace").splitlines()
        (OUT / f"{prefix}-{name}.log").write_text("\n".join(lines[-KEEP_LINES:]) + "\n")


def main(args: list[str]) -> None:
    if args[:1] == ["--gpu"]:
        capture("h200-vllm", "vllm", GPU_CASES["vllm"], "vllm-0.25.1-h200", args[1:])
        capture("h200-sglang", "sglang", GPU_CASES["sglang"], "sglang-0.5.17-h200", args[1:])
    else:
        capture("cpu-smoke", "vllm", CPU_CASES, "vllm-0.32.0-cpu", args)


if __name__ == "__main__":
    main(sys.argv[1:])
