"""Capture real engine failure logs for the classification tests (tests/data/logs/).

Each case launches the real engine server of a space with a config it refuses, prints the class the
tuner's signatures give it, and keeps the log's last lines as ``<prefix>-<case>.log``.
Run: .venv/bin/python benchmarks/capture_failure_logs.py                       (vLLM CPU, cpu-smoke)
     python3 -m benchmarks.capture_failure_logs --gpu [CASE ...]                (on the H200 host:
       vLLM 0.25.1 and SGLang 0.5.17 from their folders, h200-vllm / h200-sglang)
On the GPU host a case whose log is already kept is not launched again, so the script runs early for
the engine installed first (while the other's kit is still being carried) and once more at the end.
"""

from __future__ import annotations

import os
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

from tuner.configs.translate import build_plan
from tuner.engines import installed
from tuner.engines.spec import load_engine
from tuner.paths import expand
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
# On one H200 with the Qwen3-14B shape (27.5 GiB of BF16 weights, 160 KiB of KV cache per token:
# 6.25 GiB for the model's 40960-token context): a GPU another process already holds (the engine's
# memory fraction is not free at startup), a memory fraction that leaves less KV cache than one
# 40960-token sequence needs (CUDA graphs off: the refusal comes before them, and the launch skips
# torch.compile), and a quantization whose config the BF16 checkpoint does not have. ``_hold_gib``:
# GiB a helper process of this script holds on the GPU while the engine starts.
GPU_CASES = {
    "vllm": {
        "out-of-memory-gpu-held": {"_hold_gib": 100},
        "kv-cache-too-small": {"gpu_memory_utilization": 0.24, "max_seq_len": 40960,
                               "cuda_graphs": False},
        "unsupported-quantization-awq": {"quantization": "awq"},
    },
    # SGLang 0.5.17 started in both memory cases tried on the H200 (2026-12-02,
    # docs/results/h200-engines-prior-refusals.log): with 100 GiB held by another process and at
    # mem_fraction_static 0.2, it sized its KV pool from the memory it found and became ready,
    # each a full launch (about 5 minutes of the stay for both). It does not refuse a context
    # longer than its pool either (it caps the request length). Its memory classes stay checked
    # against the documented texts (tests/unit/engines/test_failure_signatures.py).
    "sglang": {
        "unsupported-quantization-awq": {"quantization": "awq"},
    },
}
# Where the logs go: the tests' folder here; on the GPU host a folder outside the checkout
# (TUNER_CAPTURE_DIR), since the device tool replaces the checkout at each call and a log written
# into it would be gone before `finish` collects it (lost that way in the first H200 capture).
OUT = Path(os.environ.get("TUNER_CAPTURE_DIR")
           or Path(__file__).resolve().parent.parent / "tests" / "data" / "logs")
KEEP_LINES = 60
START_S = 300


def capture(space_name: str, engine: str, cases: dict[str, dict], prefix: str, names: list[str],
            *, keep_kept: bool = False) -> None:
    space = load_space(space_name)
    spec = load_engine(engine)
    OUT.mkdir(parents=True, exist_ok=True)
    for name in names or list(cases):
        if name not in cases:
            continue
        if keep_kept and (OUT / f"{prefix}-{name}.log").is_file():
            print(f"{engine} {name}: log already kept; not launched again", flush=True)
            continue
        knobs = {k: v for k, v in cases[name].items() if not k.startswith("_")}
        plan = build_plan(spec, space.engines[engine], space.model, knobs, port=procgroup.free_port())
        log = Path(f"/tmp/tuner-capture-{engine}-{name}.log")
        log.unlink(missing_ok=True)
        with ExitStack() as stack:   # the engine stops first, then what holds the GPU
            if "_hold_gib" in cases[name]:
                holder = hold_gpu_memory(cases[name]["_hold_gib"])
                stack.callback(procgroup.kill_group, holder.pid, leader=holder)
            server = launcher.start(plan, spec, log)
            stack.callback(server.stop)
            try:
                launcher.wait_ready(server, START_S)
                print(f"{engine} {name}: became ready on this machine; no log kept", flush=True)
                continue
            except launcher.EngineStartFailed as exc:
                print(f"{engine} {name}: {exc.failure.failure_class}: {exc.failure.evidence[:200]}", flush=True)
        lines = log.read_text(errors="replace").splitlines()
        (OUT / f"{prefix}-{name}.log").write_text("\n".join(lines[-KEEP_LINES:]) + "\n")


def hold_gpu_memory(gib: int) -> subprocess.Popen:
    """A process of this script's own that holds ``gib`` GiB on GPU 0 (as another user's job would)
    until it is killed; returns once the memory is taken."""
    code = ("import sys, time, torch; x = torch.empty(int(sys.argv[1]) << 30, dtype=torch.uint8, "
            "device='cuda'); print('held', flush=True); time.sleep(3600)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(gib)], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    if proc.stdout is None or proc.stdout.readline().strip() != "held":
        procgroup.kill_group(proc.pid, leader=proc)
        raise RuntimeError(f"could not hold {gib} GiB on the GPU")
    return proc


def main(args: list[str]) -> None:
    if args[:1] == ["--gpu"]:
        # Which engines are installed is read once, now: an engine whose install finishes while
        # this runs (the next kit, during the early phase) is left to the next run.
        ready = []
        for space_name, engine, prefix in (("h200-vllm", "vllm", "vllm-0.25.1-h200"),
                                           ("h200-sglang", "sglang", "sglang-0.5.17-h200")):
            folder = Path(expand(load_space(space_name).engines[engine].install or ""))
            if (folder / installed.RECORD).is_file():
                ready.append((space_name, engine, prefix))
            else:
                print(f"{engine}: not installed at {folder}; its cases are skipped", flush=True)
        for space_name, engine, prefix in ready:
            capture(space_name, engine, GPU_CASES[engine], prefix, args[1:], keep_kept=True)
    else:
        capture("cpu-smoke", "vllm", CPU_CASES, "vllm-0.32.0-cpu", args)


if __name__ == "__main__":
    main(sys.argv[1:])
