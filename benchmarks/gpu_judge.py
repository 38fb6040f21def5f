"""The independent judge of the H200 head-to-head (issue 22, item 5): neither tool's search picks
here. It starts `vllm serve` itself (the sweep's plan: the installed folder's command and
environment), waits for /health, sends two short requests, runs `vllm bench serve` once with the
grid's workload (with ``--clients vllm,tune`` also `tune bench`, the order alternating by round),
and stops the server; for the sweep's pick, each of tune's picks and the engine's defaults (no
flags at all), launched interleaved (A B C, C B A, ...), ROUNDS times each. Why both clients: the
sweep picks with `vllm bench serve` and tune with its own client, and the one-client judge (the
sweep's client) ranked the top configs in the opposite order to tune's many launches of them
(docs/vs-vllm-sweep.md, sixth stay); a judge measuring with one tool's instrument is not neutral.

- the sweep's pick: the config with the best mean objective over its runs, as a user of `vllm
  bench sweep serve` reads its summary;
- tune's picks: STATE/picks/*.json (benchmarks/gpu_campaign.py pick, after each `tune confirm`);
  a pick that is a baseline (not a search trial or the model's pick) is the defaults arm;
- the defaults: the plan's ``defaults_cmd`` (no knob flags, the model's own max_seq_len).

Between the runs of one launch (a warm-up, then each client) the judge resets the server's prefix
cache, as the sweep does after each of its runs (`ServerProcess.after_bench` in vLLM 0.25.1's
vllm/benchmarks/sweep/server.py: POST /reset_prefix_cache, served with VLLM_SERVER_DEV_MODE=1).
Without it every run after the first replays the same seeded prompts into a warm cache: in the
ninth stay's judge-clients the server's own hit-rate counter (its last 1,000 requests) read
15.5 % after a launch's first run and 53.6-84.2 % during the later ones, which measured 10-18 %
above that first run: a different workload from the one both tools tuned for.

Every launch is appended to STATE/judge.json as it ends, with the machine it ran on (its boot id),
so a stopped judge resumes with the next launch of the same schedule on the same machine. A stay
on another machine (each stay gets a fresh one) starts the schedule over: interleaving cancels the
drift of one machine, not the difference between two, so the launches of another machine are kept
but judge nothing (benchmarks/gpu_head_to_head.py reads the machine that measured the most). Its
servers are stopped as tune stops an engine (tuner.runtime.procgroup.kill_group), so each launch
finds the GPU's memory free.

    python3 -m benchmarks.gpu_judge run --state S [--rounds 2] [--name judge] [--clients vllm,tune]
        [--warmups 1] [--no-defaults]
    python3 -m benchmarks.gpu_judge arms --state S        (the arms it would launch, no launch)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from benchmarks.sweep_peer import config_flags
from tuner.record import schema

ROUNDS = 2
SWEEP = "sweep"
DEFAULTS = "defaults"
CLIENTS = ("vllm", "tune")   # `vllm bench serve` (the sweep's client) and `tune bench` (tune's)


def names_a_config(arm: str) -> bool:
    """Whether tune's pick was launched with its knobs set (a search trial, or the performance
    model's pick, which tune launches as a control), rather than as a baseline: the engine's
    defaults, which the judge launches with no flags."""
    return arm in (schema.SEARCH, schema.MODEL_PICK_ARM)


def sweep_pick(state: Path) -> dict:
    """The sweep's answer: per config the mean of its runs' objective, the best one."""
    plan = json.loads((state / "vllm-sweep" / "plan.json").read_text())
    metric, best = plan["objective"], None
    for c in plan["configs"]:
        name = "SERVE--" + "-".join(f"{k}={v}" for k, v in c["sweep"].items())
        summary = state / "vllm-sweep" / "out" / "grid" / name / "summary.json"
        if not summary.exists():
            continue
        mean = statistics.fmean(r[metric] for r in json.loads(summary.read_text()))
        if best is None or mean > best[0]:
            best = (mean, c)
    if best is None:
        raise SystemExit(f"{state}/vllm-sweep: no config measured yet; the judge needs the sweep's pick")
    return {"knobs": best[1]["knobs"], "sweep": best[1]["sweep"], "value": best[0]}


def arms(state: Path, defaults: bool = True) -> dict[str, dict | None]:
    """label -> the sweep overrides of its config (None: the defaults), picks of equal configs
    merged under the first label that named them; ``defaults=False`` leaves the defaults arm out
    (a second judgement of the picks, where the first already measured the defaults)."""
    plan = json.loads((state / "vllm-sweep" / "plan.json").read_text())
    by_knobs = {json.dumps(c["knobs"], sort_keys=True): c["sweep"] for c in plan["configs"]}
    out: dict[str, dict | None] = {SWEEP: sweep_pick(state)["sweep"], **({DEFAULTS: None} if defaults else {})}
    for path in sorted((state / "picks").glob("*.json")):
        doc = json.loads(path.read_text())
        if not names_a_config(doc["arm"]):
            continue                                   # tune recommends a baseline: the defaults arm
        key = json.dumps({k: doc["params"][k] for k in plan["axes"]}, sort_keys=True)
        if key not in by_knobs:
            raise SystemExit(f"{path}: {doc['params']} is not a config of the grid")
        if by_knobs[key] not in out.values():
            out[f"tune-{path.stem}"] = by_knobs[key]
    return out


def machine() -> str:
    """This boot of this machine: the host name is the same on every stay's fresh machine."""
    return Path("/proc/sys/kernel/random/boot_id").read_text().strip()


def schedule(labels: list[str], rounds: int) -> list[tuple[int, str]]:
    """A B C D, D C B A, ...: each arm's mean slot is the same over two rounds, so a machine's
    linear drift favours none. The sixth stay's judge ran A B C D, A B C D and measured its FP8
    arms 1.1-1.5 % lower in the second round: the arm launched first gained up to 1 % on the last."""
    return [(r, label) for r in range(rounds) for label in (labels if r % 2 == 0 else labels[::-1])]


def _get(url: str, data: dict | None = None, timeout: float = 5) -> int:
    body = None if data is None else json.dumps(data).encode()
    req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        r.read()
        return r.status


def wait_ready(proc: subprocess.Popen, port: int, timeout_s: float) -> float:
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited {proc.returncode} before it was ready")
        try:
            if _get(f"http://127.0.0.1:{port}/health", timeout=2) == 200:
                return time.time() - t0
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the server was not ready within {timeout_s:.0f} s")


def reset_prefix_cache(port: int) -> None:
    """Empty the server's prefix cache, so the next run measures the workload itself rather than
    a replay of the prompts the last run cached (the sweep's `reset_caches`)."""
    _get(f"http://127.0.0.1:{port}/reset_prefix_cache", {}, timeout=60)


def bench_cmds(plan: dict, work: Path, tag: str) -> dict[str, tuple[list[str], dict[str, str], Path]]:
    """Each client's command, environment and result file, on the same workload flags: `vllm bench
    serve` from the engine's folder (the sweep's client) and `tune bench` (tune's), which takes
    vLLM's flag names; its environment is this process's (the engine folder's PYTHONPATH is
    vLLM's, not tune's)."""
    flags = plan["bench_cmd"][3:]                            # after `vllm bench serve`
    if "--backend" in flags:
        i = flags.index("--backend")
        flags = flags[:i] + flags[i + 2:]
    out = {}
    for client, argv, env in (("vllm", plan["bench_cmd"], {**os.environ, **plan["env"]}),
                              ("tune", [sys.executable, "-m", "tuner", "bench", *flags, "--disable-tqdm"],
                               dict(os.environ))):
        path = work / (f"{tag}.json" if client == "vllm" else f"{tag}-{client}.json")
        out[client] = ([*argv, "--save-result", "--result-dir", str(work), "--result-filename", path.name],
                       env, path)
    return out


def launch(plan: dict, label: str, config: dict | None, work: Path, tag: str,
           clients: tuple[str, ...] = ("vllm",), warmups: int = 0) -> dict:
    """One judged launch: ready time, ``warmups`` unmeasured runs of the workload by the first
    client (a launch's first burst of an online-FP8 config measured 2-5 % below its later ones
    in the sweep), each client's benchmark in the given order (schedule the orders so each arm
    gets both), the prefix cache reset between runs, teardown time. ``value`` is `vllm bench
    serve`'s objective where it ran (as in the one-client judge), ``by_client`` every client's."""
    argv = (plan["defaults_cmd"] if config is None else [*plan["serve_cmd"], *config_flags(config)])
    port = plan["port"]
    env = {**os.environ, **plan["env"], "VLLM_SERVER_DEV_MODE": "1"}   # serves /reset_prefix_cache
    started = time.time()
    with (work / f"{tag}.log").open("w") as log:
        server = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                  start_new_session=True)
        row = {"arm": label, "config": config, "argv": argv, "started": started}
        try:
            row["ready_s"] = round(wait_ready(server, port, plan["ready_timeout_s"]), 2)
            for _ in range(2):   # the first requests after start-up pay one-off costs
                _get(f"http://127.0.0.1:{port}/v1/completions", {
                    "model": plan["bench_cmd"][plan["bench_cmd"].index("--model") + 1],
                    "prompt": "Hello", "max_tokens": 8}, timeout=60)
            measured = bench_cmds(plan, work, tag)
            runs = [(bench_cmds(plan, work, f"{tag}-warmup{i}")[clients[0]], None) for i in range(warmups)]
            runs += [(measured[client], client) for client in clients]
            row["by_client"], row["cache_resets"] = {}, 0
            for n, ((bench, bench_env, out), client) in enumerate(runs):
                if n:   # each run but the launch's first finds the cache as a fresh server has it
                    reset_prefix_cache(port)
                    row["cache_resets"] += 1
                t = time.time()
                subprocess.run(bench, stdout=log, stderr=subprocess.STDOUT, env=bench_env, check=True)
                if client is None:       # a warm-up: not measured
                    continue
                doc = json.loads(out.read_text())
                row["by_client"][client] = {
                    "bench_s": round(time.time() - t, 2), "value": doc[plan["objective"]],
                    **{k: doc.get(k) for k in (plan["objective"], "mean_ttft_ms", "mean_tpot_ms",
                                               "completed", "duration")}}
            row.update(row["by_client"]["vllm" if "vllm" in clients else clients[0]])
        except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
            row["error"] = str(exc)
        finally:
            from tuner.runtime.procgroup import kill_group

            t = time.time()
            kill_group(server.pid, grace_s=60, leader=server)
            row["teardown_s"] = round(time.time() - t, 2)
            row["ended"] = time.time()
    return row


def client_order(clients: tuple[str, ...], rnd: int) -> tuple[str, ...]:
    """Even rounds in the given order, odd ones reversed: with two rounds each arm's launch is
    measured once by each client first (the sweep's runs 2 and 3 of a launch measured 2-5 % above
    its run 1)."""
    return clients if rnd % 2 == 0 else clients[::-1]


def run(state: Path, rounds: int, name: str = "judge", clients: tuple[str, ...] = ("vllm",),
        warmups: int = 0, defaults: bool = True) -> int:
    plan = json.loads((state / "vllm-sweep" / "plan.json").read_text())
    work = state / name
    work.mkdir(exist_ok=True)
    path = state / f"{name}.json"
    doc = (json.loads(path.read_text()) if path.exists() else
           {"arms": arms(state, defaults), "warmups": warmups, "clients": list(clients), "launches": []})
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))   # unwinds launch(): server stopped
    here = machine()
    done = {(r["round"], r["arm"]) for r in doc["launches"] if r.get("machine") == here and "error" not in r}
    if any(r.get("machine") != here for r in doc["launches"]):
        print("the launches of another machine kept; the schedule starts over on this one", flush=True)
    failed = 0
    for rnd, label in schedule(list(doc["arms"]), rounds):
        if (rnd, label) in done:
            continue
        row = launch(plan, label, doc["arms"][label], work, f"{label}-r{rnd}-{here[:8]}",
                     client_order(clients, rnd), warmups)
        doc["launches"].append({"round": rnd, "machine": here, **row})
        path.write_text(json.dumps(doc, indent=1))
        print(f"{label} round {rnd}: {row.get('value', row.get('error'))}", flush=True)
        failed += "error" in row
    if failed:   # the step is not done: the next run launches them again (their logs: STATE/judge/)
        print(f"{failed} launches failed", flush=True)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["run", "arms"])
    ap.add_argument("--state", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=ROUNDS)
    ap.add_argument("--name", default="judge", help="STATE/NAME.json and STATE/NAME/: one judgement each")
    ap.add_argument("--clients", default="vllm",
                    help="comma-separated, from vllm (`vllm bench serve`) and tune (`tune bench`): "
                         "each launch is measured by each, the order alternating by round")
    ap.add_argument("--warmups", type=int, default=0,
                    help="unmeasured runs of the workload per launch, before the measured ones")
    ap.add_argument("--no-defaults", action="store_true", help="leave the defaults arm out")
    args = ap.parse_args(argv)
    clients = tuple(args.clients.split(","))
    if len(set(clients)) != len(clients) or not set(clients) <= set(CLIENTS):
        ap.error(f"--clients {args.clients!r}: name vllm, tune or both, each once")
    if args.cmd == "arms":
        print(json.dumps(arms(args.state, not args.no_defaults), indent=1))
        return 0
    return run(args.state, args.rounds, args.name, clients, args.warmups, not args.no_defaults)


if __name__ == "__main__":
    sys.exit(main())
