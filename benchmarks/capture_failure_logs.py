"""Capture real vLLM failure logs for the classification tests (tests/data/logs/).

Each case launches the real vLLM CPU server with a config it refuses and keeps the log's last lines.
Run: .venv/bin/python benchmarks/capture_failure_logs.py
"""

from __future__ import annotations

import sys
from pathlib import Path

from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.runtime import launcher, procgroup
from tuner.space import load_space

CASES = {
    "invalid-config-mnbt-lt-max-len": {"max_num_tokens": 256, "chunked_prefill": False, "max_seq_len": 2048},
    "invalid-config-max-len-over-model": {"max_seq_len": 8192},
    "invalid-config-max-num-seqs-0": {"max_num_seqs": 0},
    "unsupported-quantization-awq": {"quantization": "awq"},
    "unsupported-quantization-fp8": {"quantization": "fp8"},
    # Fails only on CPUs without AVX-512/AMX ("FP8 KV cache on CPU requires x86 with AVX-512 or
    # AMX"); on others it starts, and no log is kept.
    "unsupported-hardware-fp8-kv": {"kv_cache_dtype": "fp8"},
}
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs"
KEEP_LINES = 60


def main(names: list[str]) -> None:
    space = load_space("cpu-smoke")
    spec = load_engine("vllm")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(CASES):
        plan = build_plan(spec, space.engines["vllm"], space.model, CASES[name],
                          port=procgroup.free_port())
        log = Path(f"/tmp/tuner-capture-{name}.log")
        log.unlink(missing_ok=True)
        server = launcher.start(plan, spec, log)
        try:
            launcher.wait_ready(server, 180)
            print(f"{name}: became ready on this machine; no log kept")
            continue
        except launcher.EngineStartFailed as exc:
            print(f"{name}: {exc.failure.failure_class}")
        finally:
            server.stop()
        lines = log.read_text(errors="replace").splitlines()
        (OUT / f"vllm-0.32.0-cpu-{name}.log").write_text("\n".join(lines[-KEEP_LINES:]) + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
