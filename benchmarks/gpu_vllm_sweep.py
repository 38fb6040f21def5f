"""`vllm bench sweep serve` on the H200 (issue 22, item 2): the peer's own grid over the
h200-vllm-grid space, run from the installed vLLM 0.25.1 folder, resumable across device stays,
and read back into a measured grid that benchmarks/replay_measured.py replays. Run by
benchmarks/gpu_campaign.sh.

Three subcommands:

- ``plan``: the grid from the space (every combination of the chosen axes), the server command tune
  launches for it (``build_plan``: the installed folder's command and environment, the space's fixed
  args, its fixed max_seq_len), each config's sweep overrides (exactly the knob flags ``build_plan``
  adds, as serve-params keys) and the bench command with the space's workload. Needs the tuner.
- ``run``: the sweep, its stdout time-stamped into STATE/sweep.log, appended across invocations and
  stays. vLLM 0.25.1's sweep has no ``--continue-on-error`` (its vllm/benchmarks/sweep/serve.py; the
  CPU head-to-head's 0.32 has one): a server that fails makes the whole sweep exit. ``run`` then does
  what a user of 0.25.1 has to do by hand: it records that config as refused, takes it out of the
  serve-params file and starts the sweep again with ``--resume``, which keeps every finished run
  (each run's result file). SIGTERM stops the sweep and the servers it started. Standard library
  and psutil only.
- ``convert``: STATE into the replay's grid format (``tuner.study.replay.Grid``), with the peer's
  wall-clock, each launch's costs and the refused configs.

    python3 -m benchmarks.gpu_vllm_sweep plan --state S [--axes max_num_seqs=256,1024 ...]
    python3 -m benchmarks.gpu_vllm_sweep run --state S
    PYTHONPATH=. .venv/bin/python -m benchmarks.gpu_vllm_sweep convert --state S \\
        --out benchmarks/data/grid-vllm-h200.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

from benchmarks.sweep_peer import Life, config_flags, follow, lives, read_log, stop_tree

# The grid is the space's: every combination of its choices (16 configs, the reasons in its file),
# the same candidates `tune start --space h200-vllm-grid` searches in the head-to-head.
SPACE = "h200-vllm-grid"
EXPERIMENT = "grid"
RUNNER = "[RUNNER]"


# ---- plan (on the host, with the tuner) --------------------------------------------------------

def parse_axes(given: list[str], params: dict) -> dict[str, list]:
    """``knob=v1,v2`` strings as axes, each value typed as the space's param takes it; none given:
    every choice of every param."""
    axes = {knob: list(p.choices or []) for knob, p in params.items()}
    if given:
        axes = {}
        for item in given:
            knob, _, values = item.partition("=")
            if knob not in params:
                raise SystemExit(f"--axes {item!r}: the space searches no knob {knob!r} "
                                 f"({', '.join(params)})")
            axes[knob] = [_typed(v, params[knob]) for v in values.split(",")]
    for knob, values in axes.items():
        p = params[knob]
        bad = [v for v in values if p.choices is not None and v not in p.choices]
        if bad:
            raise SystemExit(f"{knob}: {bad} are not among the space's choices {p.choices}")
    return axes


def _typed(text: str, param) -> object:
    if param.type == "bool":
        return text.lower() in ("1", "true", "on")
    for choice in param.choices or []:
        if str(choice) == text:
            return choice
    return float(text) if param.type == "float" else int(text) if param.type == "int" else text


def overrides(base: list[str], argv: list[str]) -> dict:
    """The flags ``argv`` adds to ``base``, as the sweep's serve-params keys: ``--a-b V`` is
    ``{"a_b": V}``, ``--a-b`` is ``{"a_b": True}``, ``--no-a-b`` is ``{"a_b": False}``."""
    extra = list(argv)
    for token in base:
        extra.remove(token)
    out: dict = {}
    i = 0
    while i < len(extra):
        flag = extra[i]
        if not flag.startswith("--"):
            raise ValueError(f"unexpected positional {flag!r} in a config's flags {extra}")
        key = flag[2:].replace("-", "_")
        if i + 1 < len(extra) and not extra[i + 1].startswith("--"):
            value = extra[i + 1]
            out[key] = int(value) if value.lstrip("-").isdigit() else value
            i += 2
        else:
            out[key[3:] if key.startswith("no_") else key] = not key.startswith("no_")
            i += 1
    return out


def make_plan(space_name: str, axes_given: list[str], *, num_runs: int, port: int) -> dict:
    """The sweep's serve command, bench command, environment and grid, from the space."""
    from tuner.configs.translate import build_plan
    from tuner.engines.installed import read_record
    from tuner.engines.spec import load_engine
    from tuner.paths import expand
    from tuner.space import load_space

    space = load_space(space_name)
    spec, choice = load_engine("vllm"), space.engines["vllm"]
    axes = parse_axes(axes_given, choice.params)
    base = build_plan(spec, choice, space.model, dict(choice.fixed), port=port)
    configs = []
    for combo in itertools.product(*axes.values()):
        knobs = dict(zip(axes, combo))
        argv = build_plan(spec, choice, space.model, {**choice.fixed, **knobs}, port=port).argv
        sweep = overrides(base.argv, argv)
        if sorted([*base.argv, *config_flags(sweep)]) != sorted(argv):  # what the sweep will run
            raise SystemExit(f"{knobs}: the sweep's spelling {sweep} does not give tune's argv {argv}")
        configs.append({"knobs": knobs, "sweep": sweep})
    wl = space.workload
    bench = [base.argv[0], "bench", "serve", "--backend", "vllm",
             "--base-url", f"http://{base.host}:{base.port}",
             "--model", base.served_name, "--tokenizer", space.model.resolved_tokenizer(),
             "--dataset-name", wl.dataset, "--num-prompts", str(wl.num_prompts),
             "--request-rate", str(wl.request_rate), "--seed", str(wl.seed),
             "--ignore-eos", "--temperature", "0"]  # tune's client: ignore_eos, greedy
    at = bench.index("--dataset-name") + 2
    if wl.dataset_path:
        bench[at:at] = ["--dataset-path", expand(wl.dataset_path)]
    elif wl.dataset == "random":
        bench[at:at] = ["--random-input-len", str(wl.random_input_len),
                        "--random-output-len", str(wl.random_output_len)]
    folder = Path(expand(choice.install)) if choice.install else None   # else a command (tests)
    return {"space": space.name, "workload": wl.model_dump(mode="json"),
            "objective": space.objective.metric, "direction": space.objective.direction,
            "engine_version": read_record(folder).version if folder else None,
            "folder": str(folder) if folder else None,
            "serve_cmd": base.argv, "bench_cmd": bench, "env": base.env, "port": port,
            # the engine's defaults as tune's baseline launches them (no knob, no fixed knob): the
            # judge's defaults arm (benchmarks/gpu_judge.py)
            "defaults_cmd": build_plan(spec, choice, space.model, {}, port=port).argv,
            "num_runs": num_runs, "ready_timeout_s": int(choice.startup_timeout_s or 300),
            "axes": axes, "fixed": dict(choice.fixed), "configs": configs,
            "planned": datetime.now(timezone.utc).isoformat(timespec="seconds")}


# ---- run (on the host, in the background) ------------------------------------------------------

def sweep_argv(plan: dict, state: Path, resume: bool) -> list[str]:
    return [str(Path(plan["serve_cmd"][0])), "bench", "sweep", "serve",
            "--serve-cmd", shlex.join(plan["serve_cmd"]), "--bench-cmd", shlex.join(plan["bench_cmd"]),
            "--serve-params", str(state / "serve-params.json"), "-o", str(state / "out"),
            "-e", EXPERIMENT, "--num-runs", str(plan["num_runs"]),
            "--server-ready-timeout", str(plan["ready_timeout_s"]), "--show-stdout",
            *(["--resume"] if resume else [])]


def read_json(path: Path, default):
    return json.loads(path.read_text()) if path.exists() else default


def failed_life(found: list[Life]) -> Life | None:
    """The server a crashed invocation was running: the last life, if it never ended."""
    return found[-1] if found and found[-1].outcome == "open" else None


def invoke(argv: list[str], env: dict, state: Path, note: dict) -> tuple[int | None, list]:
    """One sweep invocation, its lines appended to STATE/sweep.log and the invocation to
    STATE/invocations.json (exit code None: stopped by SIGTERM, the sweep and its servers killed)."""
    invocations = read_json(state / "invocations.json", [])
    code, lines = None, []
    with (state / "sweep.log").open("a") as log:
        start = time.time()
        log.write(f"{start:.3f} {RUNNER} start {len(invocations)} {json.dumps(argv)}\n")
        log.flush()
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=env, start_new_session=True)
        try:
            lines = follow(proc, log, 0.0)
            code = proc.wait()
        finally:
            if code is None:
                stop_tree(proc)
            end = time.time()
            log.write(f"{end:.3f} {RUNNER} exit {code}\n")
            invocations.append({"start": start, "end": end, "exit_code": code,
                                "host": os.uname().nodename, **note})
            (state / "invocations.json").write_text(json.dumps(invocations, indent=1))
    return code, lines


def run(state: Path) -> int:
    """Sweep until every config is measured or refused; each crash drops the config it was on."""
    plan = json.loads((state / "plan.json").read_text())
    env = {**os.environ, **plan["env"], "PYTHONUNBUFFERED": "1"}
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # unwinds invoke(): servers killed
    while True:
        refused = read_json(state / "refused.json", [])
        gone = [r["config"] for r in refused]
        left = [c["sweep"] for c in plan["configs"] if c["sweep"] not in gone]
        if not left:
            return 0
        (state / "serve-params.json").write_text(json.dumps(left, indent=1))
        resume = (state / "out" / EXPERIMENT).exists()
        code, lines = invoke(sweep_argv(plan, state, resume), env, state,
                             {"resume": resume, "configs_left": len(left)})
        if code == 0:
            return 0
        life = failed_life(lives(lines))
        if life is None:  # not a server's failure: stop rather than loop
            print(f"the sweep exited {code} with no server up: not a config's refusal", flush=True)
            return code or 1
        measured = any((state / "out" / EXPERIMENT).glob("*/run=*.json"))
        if not measured and (life.ready is not None or refused):
            # Nothing measured yet and a server came up, or a second config failed too: the
            # client or the engine's install is more likely at fault than the configs, and
            # dropping configs one by one would burn the stay.
            print(f"the sweep exited {code} before any run was measured "
                  f"({'in its first benchmark' if life.ready is not None else 'a second server failed'}): "
                  "more likely the bench command or the install than the config; see sweep.log",
                  flush=True)
            return code or 1
        refused.append({"config": life.config, "began": life.begin, "failed": lines[-1][0],
                        "runs_measured": len(life.measured),
                        "error": [t for at, t in lines if at >= life.begin][-40:]})
        (state / "refused.json").write_text(json.dumps(refused, indent=1))


# ---- convert (here) ----------------------------------------------------------------------------

def _run_file(state: Path, printed: str) -> Path:
    """A run's result file as the sweep printed its path on the host, under this STATE."""
    parts = Path(printed).parts
    return state / "out" / EXPERIMENT / parts[-2] / parts[-1]


def convert(state: Path) -> dict:
    """The measured grid: per config its launches (ready, benchmarks, teardown), the refused
    configs, the peer's wall-clock per invocation."""
    plan = json.loads((state / "plan.json").read_text())
    metric = plan["objective"]
    found = lives(read_log(state / "sweep.log"))
    invocations = read_json(state / "invocations.json", [])
    refused = read_json(state / "refused.json", [])
    knobs = list(plan["axes"])
    points, aborted = [], []
    for c in plan["configs"]:
        launches = []
        for life in (f for f in found if f.config == c["sweep"]):
            runs = []
            for r in life.measured:
                doc = json.loads(_run_file(state, r.output).read_text())
                runs.append({"value": doc[metric], "seconds": doc["duration"], "run": r.number,
                             "peer_s": round(r.end - r.begin, 3),
                             "metrics": {k: doc.get(k) for k in (
                                 "completed", "failed", "total_input_tokens", "total_output_tokens",
                                 "request_throughput", "output_throughput", "total_token_throughput",
                                 "mean_ttft_ms", "median_ttft_ms", "mean_tpot_ms", "mean_itl_ms")}})
            started = datetime.fromtimestamp(life.begin, timezone.utc).isoformat(timespec="seconds")
            if runs:
                last = life.measured[-1].end
                teardown = (life.end - last) if life.end is not None else 0.0
                launches.append({"ok": True, "started": started, "complete": life.outcome == "ended",
                                 "timings": {"ready_s": round(life.ready - life.begin, 3),
                                             "bench_s": round(last - life.ready, 3),
                                             "teardown_s": round(teardown, 3),
                                             "total_s": round((life.end or last) - life.begin, 3)},
                                 "full": runs})
            else:
                why = next((r for r in refused if r["config"] == c["sweep"]
                            and abs(r["began"] - life.begin) < 1), None)
                if why is not None:
                    launches.append({"ok": False, "started": started,
                                     "time_to_fail_s": round(why["failed"] - life.begin, 3),
                                     "error": why["error"][-12:]})
                else:  # stopped at the end of a stay before its first run: a cost, not a result
                    aborted.append({"params": c["knobs"], "started": started,
                                    "seconds": round(_end_of(life, invocations) - life.begin, 3)})
        if launches:
            points.append({"params": c["knobs"], "sweep": c["sweep"],
                           "launched_with": {**plan["fixed"], **c["knobs"]}, "launches": launches})
    wall = sum(i["end"] - i["start"] for i in invocations)
    return {
        "meta": {"what": f"vllm bench sweep serve (vLLM's own tuner) over the grid of the {plan['space']} space on one "
                         "H200, read back by benchmarks/gpu_vllm_sweep.py convert",
                 "engine": "vllm", "engine_version": plan["engine_version"], "gpu": "h200-141gb",
                 "launch_space": plan["space"], "model_shape": "Qwen3-14B",
                 "space": replay_space_doc(plan),
                 "objective": metric, "direction": plan["direction"], "workload": plan["workload"],
                 "axes": plan["axes"], "num_runs": plan["num_runs"],
                 "serve_cmd": plan["serve_cmd"], "bench_cmd": plan["bench_cmd"],
                 "costs": "ready_s: [BEGIN SERVER] to the first [BEGIN BENCHMARK] (the sweep's own "
                          "/health wait); full[].seconds: the benchmark's duration from its result file "
                          "(peer_s: the run's wall-clock in the sweep, vllm bench serve's start-up "
                          "included); teardown_s: last [END BENCHMARK] to [END SERVER] (the sweep "
                          "SIGKILLs the server's process group and does not wait for it)",
                 "peer_wall_s": round(wall, 1), "invocations": invocations,
                 "stay_overhead_s": round(stay_overhead(found, invocations, aborted), 1),
                 "refused": [{"config": r["config"], "error": r["error"][-12:]} for r in refused],
                 "aborted_launches": aborted, "planned": plan["planned"]},
        "knobs": knobs, "points": points}


def replay_space_doc(plan: dict) -> dict:
    """The space the replay runs on this grid: the launch space with its vLLM params replaced by
    the grid's axes (categorical, each at the space's default), the others left to the engine's
    defaults as the sweep leaves them; no defaults baseline unless the defaults are on the axes;
    the space's prior settings (the estimator's defaults where it has none)."""
    from tuner.space import load_space

    raw = load_space(plan["space"]).model_dump(mode="json", exclude_none=True)
    vllm = raw["engines"]["vllm"]
    defaults = {k: p.get("default") for k, p in vllm["params"].items()}
    vllm["params"] = {k: {"type": "categorical", "choices": v,
                          "default": defaults[k] if defaults.get(k) in v else v[0]}
                      for k, v in plan["axes"].items()}
    if not all(defaults.get(k) in v for k, v in plan["axes"].items()):
        raw["baselines"] = []
    raw.update(name=f"{plan['space']}-replay",
               prior=raw.get("prior") or {"estimator": "aiconfigurator", "gpu": "h200-141gb"})
    return raw


def stay_overhead(found: list[Life], invocations: list[dict], aborted: list[dict]) -> float:
    """Seconds the sweep spent only because it ran across stays: launches stopped at the end of a
    stay before their first run, and the start-up before the first server of each invocation that
    resumed after a stop (exit code None; a resume after a refused config is the peer's own cost).
    One uninterrupted sweep would not have spent them."""
    restarts = 0.0
    for before, inv in zip(invocations, invocations[1:]):
        if before["exit_code"] is not None:
            continue
        begins = [life.begin for life in found if inv["start"] <= life.begin <= inv["end"]]
        restarts += (min(begins) if begins else inv["end"]) - inv["start"]
    return restarts + sum(a["seconds"] for a in aborted)


def _end_of(life: Life, invocations: list[dict]) -> float:
    return next((i["end"] for i in invocations if i["start"] <= life.begin <= i["end"]), life.begin)


def progress(state: Path) -> str:
    """One line: configs measured, refused and left, and the current server."""
    plan = read_json(state / "plan.json", {"configs": []})
    done = len(list((state / "out" / EXPERIMENT).glob("*/summary.json")))
    refused = len(read_json(state / "refused.json", []))
    lines = read_log(state / "sweep.log") if (state / "sweep.log").exists() else []
    found = lives(lines)
    now = ""
    if found and found[-1].outcome == "open" and not lines[-1][1].startswith(RUNNER):
        life = found[-1]
        now = (f"; up: {life.config} since {time.time() - life.begin:.0f} s, "
               f"{'ready' if life.ready else 'starting'}, {len(life.measured)} runs")
    return f"{done} configs measured, {refused} refused, of {len(plan['configs'])}{now}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("plan", "run", "convert", "progress"):
        p = sub.add_parser(name)
        p.add_argument("--state", type=Path, required=True)
    sub.choices["plan"].add_argument("--space", default=SPACE)
    sub.choices["plan"].add_argument("--axes", nargs="*", default=[],
                                     help="knob=v1,v2 ... (default: every choice of the space's params)")
    sub.choices["plan"].add_argument("--num-runs", type=int, default=3, help="the sweep's own default")
    sub.choices["plan"].add_argument("--port", type=int, default=8321)
    sub.choices["convert"].add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    state: Path = args.state
    if args.cmd == "plan":
        from tuner.errors import InputError

        state.mkdir(parents=True, exist_ok=True)
        old = read_json(state / "plan.json", None)
        try:
            if old is not None:  # a later stay: this machine's paths, the same grid as before
                axes = [f"{k}={','.join(map(str, v))}" for k, v in old["axes"].items()]
                plan = make_plan(old["space"], axes, num_runs=old["num_runs"], port=old["port"])
                if plan["configs"] != old["configs"]:
                    raise SystemExit(f"{state}/plan.json holds another grid than the space gives now")
                plan["planned"] = old["planned"]
            else:
                plan = make_plan(args.space, args.axes, num_runs=args.num_runs, port=args.port)
        except InputError as e:   # e.g. the engine's kit not installed where the space says
            ap.error(str(e))
        (state / "plan.json").write_text(json.dumps(plan, indent=1))
        print(f"{len(plan['configs'])} configs x {plan['num_runs']} runs; serve: {shlex.join(plan['serve_cmd'])}")
        return 0
    if args.cmd == "run":
        return run(state)
    if args.cmd == "progress":
        print(progress(state))
        return 0
    grid = convert(state)
    args.out.write_text(json.dumps(grid, indent=1) + "\n")
    n = sum(len(p["launches"]) for p in grid["points"])
    print(f"{len(grid['points'])} configs, {n} launches, {len(grid['meta']['refused'])} refused, "
          f"peer wall-clock {grid['meta']['peer_wall_s']:.0f} s -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
