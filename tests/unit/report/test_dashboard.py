"""`tune dashboard`: optuna-dashboard on a real study, read through its JSON API; trial notes."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import httpx
import optuna
import pytest
from optuna.trial import TrialState, create_trial
from typer.testing import CliRunner

from tuner.cli import app
from tuner.errors import InputError
from tuner.report.dashboard import check_address, is_loopback, resolve, trial_note, write_missing_notes
from tuner.runtime.procgroup import free_port, kill_group

# The command as a program of its own, so this test does not depend on how cli.py wires it.
DASHBOARD = [sys.executable, "-c",
             "import typer; from tuner.cli.dashboard import dashboard; typer.run(dashboard)"]


def _wait_for_api(base: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"dashboard exited: {proc.communicate()[1]}")
        try:
            if httpx.get(base + "/api/meta", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise AssertionError("dashboard did not answer /api/meta")


@pytest.mark.engine
def test_dashboard_serves_a_real_study_with_attrs_notes_and_artifacts(real_study):
    studies, name, _ = real_study
    port = free_port()
    proc = subprocess.Popen([*DASHBOARD, name, "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            env={**os.environ, "TUNER_STUDIES_DIR": str(studies)})
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_for_api(base, proc)
        assert httpx.get(base + "/api/meta").json()["artifact_is_available"] is True
        summaries = httpx.get(base + "/api/studies").json()["study_summaries"]
        study_id = next(s["study_id"] for s in summaries if s["study_name"] == name)
        detail = httpx.get(f"{base}/api/studies/{study_id}", timeout=30).json()
        trials = {t["number"]: t for t in detail["trials"]}
        assert len(trials) == 3 and all(t["state"] == "Complete" for t in trials.values())
        # The API sends user attr values as strings (JSON for lists and dicts).
        attrs = {n: {a["key"]: a["value"] for a in t["user_attrs"]} for n, t in trials.items()}
        by_arm = {a["arm"]: n for n, a in attrs.items()}
        ok, refused = by_arm["vllm-defaults"], by_arm["probe-invalid"]

        # What the dashboard cannot show (constraints) is carried as attrs and notes.
        assert attrs[ok]["feasible"] == "True" and attrs[refused]["feasible"] == "False"
        assert attrs[refused]["failure_class"] == "invalid-config"
        assert "--served-model-name tiny-qwen3" in attrs[ok]["command"]
        assert float(attrs[ok]["total_token_throughput"]) > 0
        assert float(attrs[ok]["engine_rss_peak_mib"]) > 100  # telemetry of the benchmark
        assert trials[ok]["note"]["body"].startswith("**ok** · vllm-defaults · total_token_throughput")
        assert trials[refused]["note"]["body"].startswith("**infeasible: invalid-config** · probe-invalid")

        files = {a["filename"]: a for a in trials[ok]["artifacts"]}
        assert files["server.log"]["mimetype"] == "text/plain"
        assert files["launch.json"]["mimetype"] == "application/json"
        bench = [f for f in files if f.startswith("bench-") and f.endswith(".json")]
        assert len(bench) == 1 and files[bench[0]]["mimetype"] == "application/json"
        result = httpx.get(f"{base}/artifacts/{study_id}/{trials[ok]['trial_id']}/"
                           f"{files[bench[0]]['artifact_id']}").json()
        assert result["completed"] == 16 and result["telemetry"]["gpu"] is False
        log = httpx.get(f"{base}/artifacts/{study_id}/{trials[ok]['trial_id']}/"
                        f"{files['server.log']['artifact_id']}")
        assert log.status_code == 200 and "# tuner: launching vllm" in log.text
        assert {a["filename"] for a in trials[refused]["artifacts"]} == {"server.log", "launch.json"}
    finally:
        kill_group(proc.pid, grace_s=5, leader=proc)
    assert proc.poll() is not None


def _trial(state=TrialState.COMPLETE, value=1234.5, **ua):
    return create_trial(state=state, value=value if state == TrialState.COMPLETE else None,
                        user_attrs={"arm": "search", **ua},
                        system_attrs={"constraints:engine_start": 0.0} if state == TrialState.COMPLETE else {})


def test_trial_notes_say_what_happened():
    ok = _trial(feasible=True, total_token_throughput=1234.5, p99_ttft_ms=300.0,
                mean_tpot_ms=17.8, output_throughput=250.0)
    assert trial_note(ok, "total_token_throughput") == (
        "**ok** · search · total_token_throughput 1,234.5 · p99 TTFT 300.0 ms · "
        "mean TPOT 17.8 ms · output 250.0 tok/s")
    refused = _trial(value=0.0, feasible=False, failure_class="out-of-memory",
                     failure_evidence="line 1\ntorch.OutOfMemoryError: CUDA out of `memory`")
    assert trial_note(refused) == ("**infeasible: out-of-memory** · search · "
                                   "`torch.OutOfMemoryError: CUDA out of 'memory'`")
    pruned = create_trial(value=0.0, user_attrs={"arm": "search", "feasible": False,
                                                 "pruned_rule": "known-infeasible",
                                                 "pruned_reason": "like #3"},
                          system_attrs={"constraints:engine_start": 1.0})
    assert trial_note(pruned) == "**pruned** (known-infeasible) · search · like #3"
    reused = _trial(feasible=True, reused_from=4, total_token_throughput=1234.5)
    assert trial_note(reused) == ("**reused** · search · measured already in trial 4: "
                                  "not launched again")
    slow = _trial(feasible=True, slo_ok=False, slo_slack={"p99_ttft_ms": 212.5, "mean_tpot_ms": -3})
    assert trial_note(slow) == "**slo-violated** · search · p99_ttft_ms over its bound by 212.5"
    crashed = _trial(TrialState.FAIL, interrupted=True)
    assert trial_note(crashed) == "**interrupted** · search"


def test_resolve_names_the_missing_study(studies):
    with pytest.raises(InputError, match=r"no study named 'nope' in sqlite:///.*nope\.db; "
                                         r"studies there: \(none\)"):
        resolve("nope", None)
    with pytest.raises(InputError, match="no studies under .*: run `tune start --space cpu-smoke`"):
        resolve(None, None)
    studies.mkdir()
    for name in ("a", "b"):
        optuna.create_study(study_name=name, storage=f"sqlite:///{studies / (name + '.db')}")
    with pytest.raises(InputError, match="name the study to show: studies under .*: a, b"):
        resolve(None, None)
    url, names = resolve("a", None)
    assert url.endswith("a.db") and names == ["a"]


def test_non_loopback_host_warns_loudly_and_a_taken_port_is_named(studies):
    studies.mkdir()
    optuna.create_study(study_name="a", storage=f"sqlite:///{studies / 'a.db'}")
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and not is_loopback("0.0.0.0")
    app.command("noop")(lambda: None)
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = CliRunner().invoke(app, ["dashboard", "a", "--host", "0.0.0.0", "--port", str(port)])
    assert r.exit_code == 2
    assert "WARNING: binding the dashboard to 0.0.0.0: it has no authentication" in r.output
    assert f"--port {port}: already in use on 0.0.0.0" in r.output


def test_a_host_that_cannot_be_bound_is_named_not_blamed_on_the_port(studies):
    studies.mkdir()
    optuna.create_study(study_name="a", storage=f"sqlite:///{studies / 'a.db'}")
    port = free_port()
    r = CliRunner().invoke(app, ["dashboard", "a", "--host", "no.such.host.invalid", "--port", str(port)])
    assert r.exit_code == 2, r.output
    assert "error: --host no.such.host.invalid: cannot be resolved" in r.output
    assert "already in use" not in r.output and "dashboard for a on" not in r.output
    with pytest.raises(InputError, match=r"^--host 192\.0\.2\.1: not an address of this machine$"):
        check_address("192.0.2.1", port)  # TEST-NET-1: documentation only, never assigned


def test_notes_are_written_once_for_finished_trials_with_any_sampler(tmp_path):
    from optuna_dashboard._note import get_note_from_system_attrs

    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'n.db'}",
                                sampler=optuna.samplers.GridSampler({"x": [1, 2]}))
    study.optimize(lambda t: t.suggest_int("x", 1, 2), n_trials=2)
    assert write_missing_notes(study) == 2 and write_missing_notes(study) == 0
    attrs = study._storage.get_study_system_attrs(study._study_id)
    for t in study.trials:
        note = get_note_from_system_attrs(attrs, t._trial_id)
        assert note == {"version": 1, "body": f"**ok** · search · value {t.value:.1f} · p99 TTFT - "
                                              "ms · mean TPOT - ms · output - tok/s"}


def test_notes_of_multi_objective_and_screened_trials():
    two = create_trial(values=[900.0, 250.0], user_attrs={"arm": "search", "feasible": True})
    assert trial_note(two).startswith("**ok** · search · value 900.0 / 250.0 · p99 TTFT")
    screened = create_trial(state=TrialState.PRUNED, user_attrs={"arm": "search", "fidelity": "screen",
                                                                 "pruned_reason": "slow at 20%"})
    assert trial_note(screened) == "**screened-out** · search · slow at 20%"
