"""The quality probe's noise floor on a real engine: the same config launched again and probed at
several concurrencies, each probe compared with the config's first (docs/search.md#quality-guardrail).

Greedy decoding is bit-exact only if the engine computes every request the same way whatever the
batch around it and the launch; this measures whether it does, per engine and dtype. With several
``--config`` the first is the reference: every later config's first launch is also probed against it
(the precision gap the guardrail bounds).

    .venv/bin/python -m benchmarks.quality_noise --space cpu-smoke --engine vllm \\
        --config dtype=float32 --config dtype=bfloat16 --launches 2 --concurrency 8,64 \\
        --out benchmarks/data/quality-noise-vllm-cpu.json

``--weights PATH`` serves a model folder with saved weights instead of the space's model (and drops
``--load-format dummy``): transformers serve needs real weights; for vLLM it changes the logits.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import yaml

from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.fingerprint import engine_version
from tuner.runtime.launcher import start, wait_ready
from tuner.runtime.procgroup import free_port
from tuner.space import load_space, space_from_dict
from tuner.trial.quality import CANDIDATE, REFERENCE, ProbeTask, probe


def _knobs(pairs: str) -> dict:
    out = {}
    for pair in pairs.split(","):
        name, _, value = pair.partition("=")
        out[name] = yaml.safe_load(value)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--space", required=True)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--config", action="append", required=True, help="knob=value[,knob=value]")
    ap.add_argument("--launches", type=int, default=2)
    ap.add_argument("--concurrency", default="8,64")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--weights", help="a model folder with saved weights to serve instead")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    data = load_space(args.space).model_dump(mode="json")
    engine = data["engines"][args.engine]
    if args.weights:
        data["model"]["path"] = args.weights
        engine["fixed_args"] = [a for a in engine["fixed_args"] if a not in ("--load-format", "dummy")]
    data["quality"] = {"prompts": args.prompts, "max_tokens": args.max_tokens}
    space = space_from_dict(data)
    spec = load_engine(args.engine)
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    rows, first_answers, version = [], None, None
    logs = Path(tempfile.mkdtemp(prefix="quality-noise-"))  # the server logs, outside the repo
    print(f"server logs in {logs}", flush=True)
    for config in args.config:
        knobs = {**space.engines[args.engine].fixed, **_knobs(config)}
        own = None
        for launch in range(1, args.launches + 1):
            plan = build_plan(spec, space.engines[args.engine], space.model, knobs, port=free_port())
            log = logs / f"{config.replace('=', '-').replace(',', '_')}.{launch}.log"
            server = start(plan, spec, log)
            try:
                wait_ready(server, spec.readiness.startup_timeout_s)
                version = engine_version(spec.version_pattern, server.log_text()) or version
                model = plan.model_path if spec.request.model_name == "path" else plan.served_name
                for c in concurrencies:
                    q = space.quality.model_copy(update={"concurrency": c})
                    probe_space = space.model_copy(update={"quality": q})
                    task = (ProbeTask(REFERENCE) if own is None
                            else ProbeTask(CANDIDATE, {"trial": f"{config} launch 1", "answers": own}))
                    t0 = time.monotonic()
                    record, answers = probe(probe_space, spec, model, server.base_url, task)
                    rows.append({"config": config, "launch": launch, "concurrency": c,
                                 "against": task.reference["trial"] if task.reference else "itself",
                                 "seconds": round(time.monotonic() - t0, 1),
                                 "metrics": record.get("metrics"),
                                 "not_measured": record.get("not_measured")})
                    print(json.dumps(rows[-1]), flush=True)
                    own = own or answers
                if first_answers is not None and launch == 1:
                    q = space.quality.model_copy(update={"concurrency": concurrencies[0]})
                    record, _ = probe(space.model_copy(update={"quality": q}), spec, model,
                                      server.base_url,
                                      ProbeTask(CANDIDATE, {"trial": f"{args.config[0]} launch 1",
                                                            "answers": first_answers}))
                    rows.append({"config": config, "launch": launch, "concurrency": concurrencies[0],
                                 "against": f"{args.config[0]} launch 1",
                                 "metrics": record.get("metrics"),
                                 "not_measured": record.get("not_measured")})
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                server.stop()
        first_answers = first_answers or own
    Path(args.out).write_text(json.dumps({
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": {"machine": platform.machine(), "processor": platform.processor(),
                 "cpus": os.cpu_count()},
        "engine": args.engine, "engine_version": version, "space": args.space,
        "model": space.model.path, "prompts": args.prompts, "max_tokens": args.max_tokens,
        "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
