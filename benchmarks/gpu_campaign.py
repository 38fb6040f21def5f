"""The H200 runs of issue 22 that do not fit one 30-minute stay, as one queue of resumable steps:
each stay's background process works down the queue, `finish` stops it and carries the state (and
the tune studies, by `tune export`) back, and the next stay imports them and goes on where it
stopped. Run by benchmarks/gpu_campaign.sh, which also says what each call carries.

The steps, in order (a step is done once its commands exit 0; a stopped step runs again, resumed;
a failed one runs again next time, and the steps that need it wait):

- ``sweep``: `vllm bench sweep serve` over h200-vllm-grid (benchmarks/gpu_vllm_sweep.py run);
- ``fidelity``: tune's client against `vllm bench serve` on one server (benchmarks/client_parity.py);
- ``prior-25``: `tune start --space h200-vllm-grid --prior-file P -n 4` (study h2h-prior): 25 % of
  the grid's 16 launches, the defaults baseline included; ``prior-25-confirm``: `tune confirm
  --top-k 1 --repeats 1` and the pick saved; ``prior-50``: `tune resume -n` 4 launches more, to 50 %;
  ``prior-50-confirm``. The 50 % study is the 25 % one continued, so its wall-clock includes the
  first confirm: a cost counted against tune, and half the GPU time of two separate studies;
- ``noprior-25`` ... ``noprior-50-confirm``: the same with `tune start --no-prior` (study h2h-noprior);
- ``judge``: the independent judge (benchmarks/gpu_judge.py);
- ``sglang-grid``: `tune start --space h200-sglang-grid`: the 8 points of a small SGLang grid and its
  defaults, measured by tune's own trial runner for the replay (needs SGLang's kit staged as well);
- ``fidelity-paced``: the fidelity step again with the space's workload paced at 16 requests/s (about
  half the defaults' capacity) and 3 pairs: at rate inf one client's mean TTFT moves 7-9 % between
  runs (the wait in the burst's queue), more than the 3 % the comparison is to resolve; after the
  head-to-head's own steps, so it never delays them.
- ``judge-clients``: the judge again on the picks (the defaults left out: the first judge measured
  them), each launch warmed by one unmeasured run and then measured by both clients, `vllm bench
  serve` and `tune bench`, in an order alternating by round (``gpu_judge.py --name judge-clients
  --clients vllm,tune --warmups 1 --no-defaults``; 6 launches, 919 s in the ninth stay): the
  first judge measured one cold run per launch with the sweep's client only, and ranked the top
  configs in the opposite order to tune's own launches of them and to the sweep's warm runs;
- ``judge-warm``: judge-clients again with the prefix cache reset between a launch's runs, as the
  sweep resets it after each of its own (judge-clients did not: its measured runs replayed the
  warm-up's seeded prompts into a warm cache, the server's hit rate 53.6-84.2 % against 15.5 %
  after a first run, and measured 10-18 % above the first runs; same flags, 6 launches, about
  16 min).

Every run of a step is an interval in STATE/steps.json (start, end, exit code, host): the tools'
wall-clocks are sums of those, without the gaps between stays.

    python3 -m benchmarks.gpu_campaign run --state S [--prior-file P] [--only STEP ...]
    python3 -m benchmarks.gpu_campaign status --state S
    python3 -m benchmarks.gpu_campaign pick --study NAME --out FILE     (tune's recommendation)
    python3 -m benchmarks.gpu_campaign snapshot --state S --out FILE    (the state as a tarball)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

SPACE = "h200-vllm-grid"
SGLANG_GRID = "h200-sglang-grid"   # tune's own runner over a small SGLang grid (issue 22, item 2)
PACED_RATE = 16                    # requests/s: the h200-vllm defaults serve about 37 at rate inf
# the two fidelity steps: benchmarks/client_parity.py's flags, and the result file in the state
FIDELITY = {"fidelity": (["--pairs", "2"], "fidelity-h200.json"),
            "fidelity-paced": (["--request-rate", str(PACED_RATE), "--pairs", "3"],
                               "fidelity-h200-paced.json")}
GRID_LAUNCHES = 16
BUDGETS = (25, 50)
VARIANTS = ("prior", "noprior")
TUNE = [sys.executable, "-m", "tuner"]


# The judges that measure each launch with both clients after a warm-up run, in the order run:
# judge-clients let the prefix cache carry over between a launch's runs, judge-warm resets it.
CLIENT_JUDGES = ("judge-clients", "judge-warm")


def launches(budget_percent: int) -> int:
    return GRID_LAUNCHES * budget_percent // 100


def study_name(variant: str) -> str:
    return f"h2h-{variant}"


def steps() -> list[str]:
    out = ["sweep", "fidelity"]
    for variant in VARIANTS:
        for budget in BUDGETS:
            out += [f"{variant}-{budget}", f"{variant}-{budget}-confirm"]
    return out + ["judge", "sglang-grid", "fidelity-paced", *CLIENT_JUDGES]


class Campaign:
    """The queue's state in one folder: steps.json (each step's runs and markers), the sweep's
    state, fidelity, picks, the judge's launches and every command's log."""

    def __init__(self, state: Path, prior_file: Path | None = None) -> None:
        self.state, self.prior_file = state, prior_file
        self.sweep = state / "vllm-sweep"
        (state / "logs").mkdir(parents=True, exist_ok=True)
        (state / "picks").mkdir(exist_ok=True)

    @property
    def record(self) -> dict:
        path = self.state / "steps.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def save(self, record: dict) -> None:
        tmp = self.state / "steps.json.tmp"
        tmp.write_text(json.dumps(record, indent=1))
        tmp.replace(self.state / "steps.json")

    def done(self, step: str) -> bool:
        return bool(self.record.get(step, {}).get("done"))

    def started(self, step: str) -> bool:
        return bool(self.record.get(step, {}).get("runs"))

    def commands(self, step: str) -> list[list[str]]:
        """What the step runs now: its first run's commands, or those that resume it."""
        if step == "sweep":
            return [[sys.executable, "-m", "benchmarks.gpu_vllm_sweep", "run", "--state", str(self.sweep)]]
        if step in FIDELITY:
            flags, out = FIDELITY[step]
            return [[sys.executable, "-m", "benchmarks.client_parity", "--space", "h200-vllm", "--workloads",
                     "space", *flags, "--out", str(self.state / out)]]
        if step == "judge":
            return [[sys.executable, "-m", "benchmarks.gpu_judge", "run", "--state", str(self.state)]]
        if step in CLIENT_JUDGES:   # the reset between runs is the judge's own, not a flag
            return [[sys.executable, "-m", "benchmarks.gpu_judge", "run", "--state", str(self.state),
                     "--name", step, "--clients", "vllm,tune", "--warmups", "1", "--no-defaults"]]
        if step == "sglang-grid":   # needs SGLang's kit staged too: gpu_campaign.sh says how
            if self.started(step):
                return [[*TUNE, "resume", SGLANG_GRID]]
            return [[*TUNE, "start", "--space", SGLANG_GRID, "--study", SGLANG_GRID]]
        variant, budget, *confirm = step.split("-")
        name = study_name(variant)
        pick = [sys.executable, "-m", "benchmarks.gpu_campaign", "pick", "--study", name,
                "--out", str(self.state / "picks" / f"{variant}-{budget}.json")]
        if self.started(step):           # stopped part-way: the study's stored budget says the rest
            return [[*TUNE, "resume", name], *([pick] if confirm else [])]
        if confirm:
            return [[*TUNE, "confirm", name, "--top-k", "1", "--repeats", "1"], pick]
        if int(budget) == BUDGETS[0]:
            # noprior leaves the space's prior: out, whatever the host has installed
            prior = (["--no-prior"] if variant == "noprior" else
                     ["--prior-file", str(self.prior_file)] if self.prior_file else [])
            return [[*TUNE, "start", "--space", SPACE, "--study", name, "-n", str(launches(BUDGETS[0])),
                     *prior]]
        more = launches(int(budget)) - launches(BUDGETS[0])   # the confirm's launches come on top
        return [[*TUNE, "resume", name, "-n", str(finished(name) + more)]]

    def run_step(self, step: str) -> int | None:
        """The step's commands one after another, each into its log; None when stopped."""
        record = self.record
        entry = record.setdefault(step, {"runs": [], "done": False})
        commands = self.commands(step)
        run = {"start": time.time(), "end": None, "exit_code": None, "host": os.uname().nodename,
               "commands": commands}
        entry["runs"].append(run)
        self.save(record)
        code: int | None = 0
        with (self.state / "logs" / f"{step}.log").open("a") as log:
            for argv in commands:
                log.write(f"[{time.strftime('%H:%M:%S')}] {' '.join(argv)}\n")
                log.flush()
                code = _wait(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True))
                if code != 0:
                    break
        run.update(end=time.time(), exit_code=code)
        entry["done"] = code == 0
        self.save(record)
        return code


_stopping = False


def _wait(proc: subprocess.Popen) -> int | None:
    """The command's exit code, or None when SIGTERM came: it is passed on to the command's
    session (tune stops its engine as on Ctrl-C; the sweep's driver kills its servers)."""
    while True:
        try:
            code = proc.wait(timeout=1)
            return None if _stopping else code
        except subprocess.TimeoutExpired:
            if _stopping:
                from tuner.runtime.procgroup import kill_group
                kill_group(proc.pid, grace_s=120, leader=proc)
                return None


def finished(study: str) -> int:
    """Launches the study has finished (what `tune resume -n` counts)."""
    from tuner.record.storage import default_url
    from tuner.study import lifecycle

    return lifecycle.finished_count(lifecycle.load(study, default_url(study)).study)


def needs(step: str) -> list[str]:
    """The steps that must be done before this one: a confirm repeats its search's configs, the
    50 % budget continues the confirmed 25 % study, and the judge launches every tool's pick."""
    if step in ("judge", *CLIENT_JUDGES):
        return ["sweep", *(f"{v}-{b}-confirm" for v in VARIANTS for b in BUDGETS)]
    variant = step.partition("-")[0]
    if variant not in VARIANTS:
        return []
    order = [s for s in steps() if s.startswith(f"{variant}-")]
    return order[:order.index(step)][-1:]


def run(campaign: Campaign, only: list[str]) -> int:
    """Every step not done yet whose needs are done, in order. A step that fails does not stop
    the queue (a stay's minutes go to the steps that do not need it); it runs again next time."""
    def stop(*_: object) -> None:
        global _stopping
        _stopping = True

    signal.signal(signal.SIGTERM, stop)
    left = []
    for step in steps():
        if (only and step not in only) or campaign.done(step):
            continue
        waiting = [s for s in needs(step) if not campaign.done(s)]
        if waiting:
            print(f"[{time.strftime('%H:%M:%S')}] {step} waits for {', '.join(waiting)}", flush=True)
            left.append(step)
            continue
        print(f"[{time.strftime('%H:%M:%S')}] step {step}", flush=True)
        code = campaign.run_step(step)
        if code is None:
            print(f"[{time.strftime('%H:%M:%S')}] stopped in {step}", flush=True)
            return 143
        if code != 0:
            print(f"[{time.strftime('%H:%M:%S')}] {step} exited {code} (logs/{step}.log): "
                  "going on with the steps that do not need it", flush=True)
            left.append(step)
    print(f"[{time.strftime('%H:%M:%S')}] " + (f"left: {', '.join(left)}" if left else "every step done"),
          flush=True)
    return 1 if left else 0


def status(campaign: Campaign) -> str:
    record = campaign.record
    rows = []
    for step in steps():
        entry = record.get(step, {})
        spent = sum((r["end"] or time.time()) - r["start"] for r in entry.get("runs", []))
        state = "done" if entry.get("done") else "started" if entry.get("runs") else "-"
        rows.append(f"{step:<18} {state:<8} {len(entry.get('runs', []))} runs {spent:7.0f} s")
    return "\n".join(rows)


def snapshot(campaign: Campaign, out: Path) -> Path:
    """The state as `finish` returns it, taken while the queue runs: each poll of a stay returns
    one, so a stay cut before its `finish` (the session's turn ended, the machine went back) loses
    only the minutes since its last poll. A run still open ends at the snapshot, so its
    wall-clock counts what the snapshot keeps; the next stay runs that step again, resumed."""
    record, now = campaign.record, time.time()
    for entry in record.values():
        for run in entry["runs"]:
            if run["end"] is None:
                run.update(end=now, snapshot=True)
    partial = out.with_name(out.name + ".partial")
    data = json.dumps(record, indent=1).encode()
    info = tarfile.TarInfo("campaign/steps.json")
    info.size, info.mtime = len(data), int(now)
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(campaign.state, arcname="campaign",
                filter=lambda member: None if member.name == info.name else member)
        tar.addfile(info, io.BytesIO(data))
    partial.replace(out)
    return out


def pick(study: str, out: Path) -> dict:
    """`tune best`'s answer as data: the arm, the config's params, its median, n, and the study's
    launches so far."""
    from tuner.record import results
    from tuner.record.storage import default_url
    from tuner.study import lifecycle

    handle = lifecycle.load(study, default_url(study))
    best = results.best_config(handle.study)
    doc = {"study": study, "launches": lifecycle.finished_count(handle.study),
           "arm": best.arm if best else None, "params": dict(best.params) if best else None,
           "median": best.median if best else None, "n": best.n if best else 0,
           "at": time.time()}
    out.write_text(json.dumps(doc, indent=1))
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--state", type=Path, required=True)
    r.add_argument("--prior-file", type=Path, default=None)
    r.add_argument("--only", nargs="*", default=[], choices=steps())
    s = sub.add_parser("status")
    s.add_argument("--state", type=Path, required=True)
    p = sub.add_parser("pick")
    p.add_argument("--study", required=True)
    p.add_argument("--out", type=Path, required=True)
    n = sub.add_parser("snapshot")
    n.add_argument("--state", type=Path, required=True)
    n.add_argument("--out", type=Path, required=True)
    args = ap.parse_args(argv)
    if args.cmd == "pick":
        print(json.dumps(pick(args.study, args.out)))
        return 0
    campaign = Campaign(args.state, getattr(args, "prior_file", None))
    if args.cmd == "status":
        print(status(campaign))
        return 0
    if args.cmd == "snapshot":
        print(f"snapshot: {snapshot(campaign, args.out)}")
        return 0
    return run(campaign, args.only)


if __name__ == "__main__":
    sys.exit(main())
