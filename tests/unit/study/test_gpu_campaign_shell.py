"""benchmarks/gpu_campaign.sh, the H200 stay's entry point, run here through its phases as a stay
runs them (stage, start, poll, finish), with the committed real campaign state carried in
.gpu-state and a stand-in for vLLM 0.25.1's `vllm bench sweep serve` (the one
test_gpu_vllm_sweep.py checks the driver against). What it shows: a stage call keeps what it
carried outside the checkout, start restores the campaign and resumes the sweep where the last
stay stopped, the steps that need a GPU fail without stopping the queue, and finish returns the
state for the next stay. The device time this saves is the point: a broken phase found on the
H200 costs a stay. The committed sweep is complete, so the state carried in is the committed one
cut back to a stopped sweep: its newest config and everything after the sweep removed, as a stay's
end leaves it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile

from benchmarks import gpu_campaign as gc
from tests.helpers import REPO
from tests.unit.study.test_gpu_vllm_sweep import install_stand_in

STUDIES = ("h2h-prior", "h2h-noprior", "h200-sglang-grid")   # gpu_campaign.sh's, exported each stay


def _phase(checkout, env, *args, timeout=300) -> str:
    done = subprocess.run(["bash", "benchmarks/gpu_campaign.sh", *args], cwd=checkout, env=env,
                          capture_output=True, text=True, errors="replace", timeout=timeout)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def _stopped_sweep(folder):
    """The committed campaign as a stay's end leaves a sweep: the newest measured config's results
    gone, the sweep's runs and invocations that ended after it left out, no later step begun."""
    with tarfile.open(REPO / "benchmarks" / "data" / "h200-campaign.tar.gz") as tar:
        tar.extractall(folder, filter="data")
    camp = folder / "campaign"
    newest = max((camp / "vllm-sweep" / "out").glob("*/*/summary.json"), key=lambda p: p.stat().st_mtime)
    cut = newest.stat().st_mtime
    shutil.rmtree(newest.parent)
    invocations = camp / "vllm-sweep" / "invocations.json"
    invocations.write_text(json.dumps([i for i in json.loads(invocations.read_text()) if i["end"] < cut]))
    sweep = json.loads((camp / "steps.json").read_text())["sweep"]
    (camp / "steps.json").write_text(json.dumps(
        {"sweep": {"runs": [r for r in sweep["runs"] if r["end"] < cut], "done": False}}))
    shutil.rmtree(camp / "picks", ignore_errors=True)
    for later in [*camp.glob("fidelity-*.json"), *(camp / "logs").glob("*.log")]:
        if later.name not in ("sweep.log", "campaign.log"):
            later.unlink()
    return camp


def _host(tmp_path, vllm: bool = True):
    """A checkout of this repository as a device call gets it, an empty .gpu-state for the call to
    carry, vLLM's kit installed (the sweep's stand-in) unless ``vllm`` is false, and the environment
    gpu_campaign.sh reads: (checkout, .gpu-state, the state folder, $OUT, env)."""
    checkout, state, out = tmp_path / "checkout", tmp_path / "gpu-study", tmp_path / "out"
    checkout.mkdir()
    for name in ("benchmarks", "tuner", "search_spaces", "engines"):
        (checkout / name).symlink_to(REPO / name)
    carried = checkout / ".gpu-state"
    carried.mkdir()
    if vllm:
        install_stand_in(state / "cache")
    bin_dir, site = tmp_path / "bin", tmp_path / "site"
    bin_dir.mkdir()
    site.mkdir()
    (site / ".done").touch()                                # the tuner's deps: this interpreter's
    (bin_dir / "python3").write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    (bin_dir / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "OUT": str(out),
           "GPU_STATE": str(state), "GPU_KITS": str(tmp_path / "kits"), "GPU_SITE": str(site)}
    return checkout, carried, state, out, env


def test_a_stay_stages_starts_polls_and_finishes_the_campaign(tmp_path):
    checkout, carried, state, out, env = _host(tmp_path)
    env["FAKE_REFUSE"] = json.dumps({"max_num_seqs": 7})    # no config refused
    before = _stopped_sweep(tmp_path / "before")
    with tarfile.open(carried / "campaign.tar.gz", "w:gz") as tar:
        tar.add(before, arcname="campaign")
    (carried / "h200-vllm-grid-prior.json").write_text("{}")

    stays = json.loads((before / "vllm-sweep" / "invocations.json").read_text())
    measured = len(list((before / "vllm-sweep" / "out").glob("*/*/summary.json")))
    assert 0 < measured < 16

    _phase(checkout, env, "stage")
    shutil.rmtree(carried)                                  # the next call carries none of it
    # the steps this stay has time for: all but the paced fidelity
    started = _phase(checkout, env, "start", *(s for s in gc.steps() if s != "fidelity-paced"))
    assert "restored the campaign" in started and "campaign started" in started
    polled = _phase(checkout, env, "poll", "120")
    assert "the campaign has exited" in polled
    assert "16 configs measured, 0 refused, of 16" in polled   # the earlier stays' and the rest now
    _phase(checkout, env, "finish")

    with tarfile.open(out / "campaign.tar.gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    record = json.loads((tmp_path / "back" / "campaign" / "steps.json").read_text())
    assert record["sweep"]["done"] and len(record["sweep"]["runs"]) == len(stays) + 1
    invocations = json.loads((tmp_path / "back" / "campaign" / "vllm-sweep" / "invocations.json").read_text())
    assert invocations[:-1] == stays and invocations[-1]["resume"] and invocations[-1]["exit_code"] == 0
    # No GPU here: the tune steps fail at tune's own preflight, each without stopping the queue.
    for step in ("fidelity", "prior-25", "noprior-25", "sglang-grid"):
        assert record[step]["runs"] and not record[step]["done"], step
    assert "prior-25-confirm" not in record and "judge" not in record
    assert "fidelity-paced" not in record                          # not asked for: not run
    log = (tmp_path / "back" / "campaign" / "logs" / "prior-25.log").read_text()
    assert "--prior-file" in log and str(state / "campaign" / "h200-vllm-grid-prior.json") in log


def test_the_next_stay_imports_the_studies_and_runs_only_what_is_left(tmp_path):
    """What the next stay carries, as committed: the campaign state (every step done but the
    judge that resets the prefix cache: the sweep, both tune studies at 25 % and 50 %, each
    confirmed, the first judge, both fidelity runs, the SGLang grid, the two-client judge) and
    `tune export` of the three studies. Start imports them and runs no step that is done; the one
    left fails here (no engine, no GPU) without harm, and poll and finish return the state and
    export the studies back."""
    checkout, carried, state, out, env = _host(tmp_path)
    shutil.copy(REPO / "benchmarks" / "data" / "h200-campaign.tar.gz", carried / "campaign.tar.gz")
    for study in STUDIES:
        folder = REPO / "benchmarks" / "data" / ("h200-h2h" if study.startswith("h2h") else "")
        shutil.copy(folder / f"{study}.tar.gz", carried / f"{study}.tar.gz")
    with tarfile.open(carried / "campaign.tar.gz") as tar:
        tar.extractall(tmp_path / "before", filter="data")
    before = json.loads((tmp_path / "before" / "campaign" / "steps.json").read_text())
    left = [step for step in gc.steps() if not before.get(step, {}).get("done")]
    assert left == ["judge-warm"]

    started = _phase(checkout, env, "start")
    assert "restored the campaign" in started and "imported" in started.lower()
    for study in STUDIES:
        assert (state / "studies" / f"{study}.db").exists(), study
    polled = _phase(checkout, env, "poll", "120")
    assert "the campaign has exited" in polled and "left: judge-warm" in polled
    assert (out / "campaign.tar.gz").exists() and (out / "h2h-noprior.tar.gz").exists()   # what a cut stay keeps
    _phase(checkout, env, "finish")

    with tarfile.open(out / "campaign.tar.gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    camp = tmp_path / "back" / "campaign"
    record = json.loads((camp / "steps.json").read_text())
    for step in gc.steps():
        if step not in left:
            assert record[step] == before[step], step              # done: not run again
        else:
            assert record[step]["runs"] and not record[step]["done"], step
    assert "6 launches failed" in (camp / "logs" / "judge-warm.log").read_text()   # 3 arms x 2
    assert json.loads((camp / "judge.json").read_text()) == json.loads(
        (tmp_path / "before" / "campaign" / "judge.json").read_text())
    for study in STUDIES:
        assert (out / f"{study}.tar.gz").exists(), study                          # for the stay after


def test_a_stay_without_vllms_kit_keeps_the_sweeps_plan_and_runs_the_sglang_grid(tmp_path):
    """The SGLang grid's stay stages SGLang's kit alone (the call's 64 MiB and the stay's 30 minutes
    have no room for vLLM's too): start must not need vLLM's folder for the sweep's plan, which
    names it, and keeps the carried plan as it was."""
    checkout, carried, state, out, env = _host(tmp_path, vllm=False)
    with tarfile.open(REPO / "benchmarks" / "data" / "h200-campaign.tar.gz") as tar:
        tar.extractall(tmp_path / "before", filter="data")
    camp = tmp_path / "before" / "campaign"
    record = json.loads((camp / "steps.json").read_text())
    del record["sglang-grid"]                               # as before the grid's first stay
    (camp / "steps.json").write_text(json.dumps(record))
    with tarfile.open(carried / "campaign.tar.gz", "w:gz") as tar:
        tar.add(camp, arcname="campaign")
    plan = json.loads((camp / "vllm-sweep" / "plan.json").read_text())

    started = _phase(checkout, env, "start", "sglang-grid")
    assert "vLLM 0.25.1 not installed: the sweep's plan is kept as carried" in started
    assert "campaign started" in started
    assert "the campaign has exited" in _phase(checkout, env, "poll", "120")
    _phase(checkout, env, "finish")

    with tarfile.open(out / "campaign.tar.gz") as tar:
        tar.extractall(tmp_path / "back", filter="data")
    camp = tmp_path / "back" / "campaign"
    assert json.loads((camp / "vllm-sweep" / "plan.json").read_text()) == plan
    record = json.loads((camp / "steps.json").read_text())
    assert record["sglang-grid"]["runs"] and not record["sglang-grid"]["done"]   # no SGLang, no GPU here
    assert "judge-warm" not in record                                              # not asked for
