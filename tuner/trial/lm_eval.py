"""Task accuracy with lm-evaluation-harness against the trial's own server, as an external command.

`lm-eval run --model local-completions` sends its requests to the server's /v1/completions like any
OpenAI client; its results JSON gives one score per task, which the quality guardrail compares with
the reference arm's (``quality.lm_eval.max_drop``). lm-eval is never imported: it is the optional
extra ``tuner[quality]`` or any command named by ``quality.lm_eval.command`` (its own venv).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tuner.errors import InputError
from tuner.paths import expand
from tuner.runtime.procgroup import kill_group
from tuner.space import LmEval

_VALIDATE_TIMEOUT_S = 300


def command(cfg: LmEval) -> list[str]:
    """The space's command, else `lm-eval` beside the running Python (``tuner[quality]``), else
    the one on PATH."""
    if cfg.command:
        return [expand(cfg.command[0]), *cfg.command[1:]]
    beside = Path(sys.executable).parent / "lm-eval"
    return [str(beside) if beside.exists() else "lm-eval"]


def _include(cfg: LmEval) -> list[str]:
    return ["--include_path", expand(cfg.include_path)] if cfg.include_path else []


def _env(cfg: LmEval, api_key: str | None = None) -> dict[str, str]:
    env = {**os.environ, **cfg.env}
    if api_key:  # local-completions reads the key from the environment, never from argv
        env["OPENAI_API_KEY"] = api_key
    return env


def check_tasks(cfg: LmEval) -> None:
    """Before any launch: lm-eval runs here and knows every task (`lm-eval validate`), so a typo
    costs seconds instead of a study."""
    if cfg.include_path and not Path(expand(cfg.include_path)).is_dir():
        raise InputError(f"quality.lm_eval.include_path {cfg.include_path!r} is not a folder")
    argv = [*command(cfg), "validate", "--tasks", ",".join(cfg.tasks), *_include(cfg)]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=_VALIDATE_TIMEOUT_S,
                              env=_env(cfg))
    except FileNotFoundError:
        raise InputError(f"quality.lm_eval: {argv[0]!r} not found; install lm-evaluation-harness "
                         "(pip install 'tuner[quality]') or name its command in "
                         "quality.lm_eval.command") from None
    except subprocess.TimeoutExpired:
        raise InputError(f"quality.lm_eval: `{' '.join(argv)}` did not finish in "
                         f"{_VALIDATE_TIMEOUT_S} s") from None
    if proc.returncode != 0:
        lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
        said = next((line for line in lines if "not found" in line.lower()), lines[-1] if lines else "")
        raise InputError(f"quality.lm_eval.tasks: {said.strip()} (`{' '.join(argv)}` exited "
                         f"{proc.returncode})")


def run(cfg: LmEval, *, base_url: str, model: str, out_dir: Path,
        api_key: str | None = None) -> dict[str, Any]:
    """Run the tasks against the server; ``{"tasks": {task: {metric, value, higher_is_better,
    samples}}}``, or ``{"error": ...}`` when lm-eval failed (the log is in ``out_dir``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    model_args = {"model": model, "base_url": base_url.rstrip("/") + "/v1/completions",
                  "num_concurrent": cfg.num_concurrent, "max_retries": 1,
                  "tokenized_requests": False, "tokenizer_backend": None, **cfg.model_args}
    argv = [*command(cfg), "run", "--model", "local-completions",
            "--model_args", ",".join(f"{k}={v}" for k, v in model_args.items()),
            "--tasks", ",".join(cfg.tasks), "--output_path", str(out_dir), *_include(cfg)]
    if cfg.limit is not None:
        argv += ["--limit", str(cfg.limit)]
    if cfg.num_fewshot is not None:
        argv += ["--num_fewshot", str(cfg.num_fewshot)]
    log = out_dir / "lm-eval.log"
    with log.open("w") as out:
        try:
            proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                    env=_env(cfg, api_key), start_new_session=True)
        except FileNotFoundError:
            return {"error": f"{argv[0]!r} not found"}
        try:
            code = proc.wait(timeout=cfg.timeout_s)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid, leader=proc)
            return {"error": f"lm-eval did not finish in {cfg.timeout_s:g} s (log: {log})"}
        except BaseException:
            kill_group(proc.pid, leader=proc)
            raise
    if code != 0:
        tail = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        return {"error": f"lm-eval exited {code}: {tail[-1].strip() if tail else '(no output)'}"}
    return read_results(out_dir, cfg.tasks)


def read_results(out_dir: Path, tasks: list[str]) -> dict[str, Any]:
    """Each task's first metric (its metric_list order; ``higher_is_better`` says which way is
    better) from the newest results_*.json lm-eval wrote under ``out_dir``."""
    files = sorted(out_dir.rglob("results_*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        return {"error": f"lm-eval wrote no results_*.json under {out_dir}"}
    doc = json.loads(files[-1].read_text())
    out: dict[str, dict] = {}
    for task in tasks:
        scores = doc.get("results", {}).get(task)
        better = doc.get("higher_is_better", {}).get(task) or {}
        if not isinstance(scores, dict) or not better:
            return {"error": f"lm-eval's results have no scored task {task!r}"}
        name = next(iter(better))
        key = next((k for k in scores if k.split(",")[0] == name
                    and isinstance(scores[k], (int, float))), None)
        if key is None:
            return {"error": f"lm-eval reported no {name!r} for task {task!r}"}
        out[task] = {"metric": key, "value": float(scores[key]),
                     "higher_is_better": bool(better[name]),
                     "samples": (doc.get("n-samples", {}).get(task) or {}).get("effective")}
    return {"tasks": out}


def drops(reference: dict[str, Any], measured: dict[str, Any]) -> dict[str, float]:
    """Per task, how much worse than the reference this config scored (negative: better)."""
    out = {}
    for task, ref in reference["tasks"].items():
        got = measured["tasks"][task]["value"]
        out[task] = ref["value"] - got if ref["higher_is_better"] else got - ref["value"]
    return out
