"""Capture real engine failure logs for the classification tests (tests/data/logs/).

Each case launches the real vLLM CPU server of cpu-smoke with a config it refuses, prints the class
the tuner's signatures give it, and keeps the log's last lines as ``vllm-0.32.0-cpu-<case>.log``.
The GPU logs beside them (``*-h200-*.log``) were captured the same way on an H200 from the
experiment's spaces (experiments/h200-2026-12/).

    .venv/bin/python scripts/capture_failure_logs.py [CASE ...]
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
        knobs = cases[name]
        plan = build_plan(spec, space.engines[engine], space.model, knobs, port=procgroup.free_port())
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
    capture("cpu-smoke", "vllm", CPU_CASES, "vllm-0.32.0-cpu", args)


if __name__ == "__main__":
    main(sys.argv[1:])
