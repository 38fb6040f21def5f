"""tune evaluate's bookkeeping, with run_trial replaced by a fake: order, records, workload sets."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest

from tests.helpers import report_study
from tuner.engines.failures import Failure
from tuner.errors import InputError
from tuner.record.storage import artifact_store
from tuner.report import data as report_data
from tuner.report import evaluate as ev
from tuner.space import Workload, load_space
from tuner.study.lifecycle import StudyHandle
from tuner.trial.runner import TrialOutcome

optuna.logging.set_verbosity(optuna.logging.WARNING)
WORKLOADS = [Workload(name="short-128-4", random_input_len=128, random_output_len=4),
             Workload(name="long-1900-100", random_input_len=1900, random_output_len=100)]


class FakeRunner:
    """Stands in for run_trial: throughput grows with max_num_seqs; 'long' fails on small configs."""

    def __init__(self):
        self.calls = []

    def __call__(self, space, engine, knobs, trial_dir, *, omit=frozenset(), workloads=None,
                 on_phase=lambda _: None, **_):
        self.calls.append((knobs["max_num_seqs"], omit, [w.name for w in workloads], trial_dir))
        on_phase("benchmarking")
        n = len(self.calls)
        plan = SimpleNamespace(command_line=lambda: f"vllm serve --max-num-seqs {knobs['max_num_seqs']}")
        outcome = TrialOutcome(plan=plan, log_path=trial_dir / "server.log",
                               engine_version="0.32.0", timings={"total_s": 1.0})
        for w in workloads:
            if w.name.startswith("long") and knobs["max_num_seqs"] < 100:
                outcome.failure = Failure("requests-failed", "every benchmark request failed",
                                          "400 max_model_len")
                outcome.workload_metrics[w.name] = {"completed": 0, "failed": 20}
                break
            tput = 40.0 * knobs["max_num_seqs"] + n
            outcome.workload_metrics[w.name] = {
                "total_token_throughput": tput, "output_throughput": tput / 4,
                "mean_tpot_ms": 10.0 + n, "p99_ttft_ms": 300.0, "mean_ttft_ms": 200.0,
                "completed": 100, "failed": 0}
        return outcome


@pytest.fixture
def handle(studies):
    url = f"sqlite:///{studies / 'synthetic.db'}"
    studies.mkdir()
    return StudyHandle(report_study(url), load_space("cpu-smoke"), url)


def test_runs_are_interleaved_and_recorded(handle, monkeypatch):
    fake = FakeRunner()
    monkeypatch.setattr(ev, "run_trial", fake)
    phases = []
    result = ev.evaluate(handle, WORKLOADS, repeats=2, on_phase=phases.append)

    # baseline (trial 0: 128 seqs, knob omitted), best (trial 5: 31 seqs), baseline, best
    assert [(c[0], c[1]) for c in fake.calls] == [(128, frozenset({"max_num_seqs"})),
                                                  (31, frozenset()),
                                                  (128, frozenset({"max_num_seqs"})),
                                                  (31, frozenset())]
    assert [c[3].name for c in fake.calls] == ["baseline-r1", "best-r1", "baseline-r2", "best-r2"]
    assert all(c[2] == ["short-128-4", "long-1900-100"] for c in fake.calls)
    assert phases[0] == "baseline (trial 0) repeat 1/2: benchmarking"

    summary = handle.study.user_attrs["evaluation"]
    assert summary == json.loads(json.dumps(result.summary))
    assert summary["best"]["trial"] == 5 and summary["baseline"]["arm"] == "vllm-defaults"
    short = summary["workloads"][0]
    assert short["name"] == "short-128-4" and short["spec"]["random_output_len"] == 4
    assert short["baseline"]["total_token_throughput"] == [40.0 * 128 + 1, 40.0 * 128 + 3]
    assert short["best"]["total_token_throughput"] == [40.0 * 31 + 2, 40.0 * 31 + 4]
    long = summary["workloads"][1]
    assert long["best"]["total_token_throughput"] == [] and long["best"]["failed"] == [20, 20]
    assert [f["arm"] for f in summary["failures"]] == ["best", "best"]

    # the per-run detail is a study artifact
    store = artifact_store(handle.url, handle.name)
    with store.open_reader(summary["artifact_id"]) as f:
        detail = json.load(f)
    assert [(r["arm"], r["repeat"]) for r in detail["runs"]] == [
        ("baseline", 1), ("best", 1), ("baseline", 2), ("best", 2)]
    assert detail["runs"][1]["command"] == "vllm serve --max-num-seqs 31"
    assert detail["runs"][1]["failure"]["class"] == "requests-failed"

    rows = report_data.build(handle.study).workload_rows
    tput = rows[0]
    assert tput.change.n_base == 2 and tput.change.pct < -70
    assert tput.change.low is None and tput.change.note == "n=2, no interval"  # 2 repeats: no claim
    assert rows[4].workload == "long-1900-100" and rows[4].failed_requests == 40


def test_baseline_is_required(handle, monkeypatch):
    monkeypatch.setattr(ev, "run_trial", FakeRunner())
    with pytest.raises(InputError, match="--repeats 0: needs at least 1"):
        ev.evaluate(handle, WORKLOADS, repeats=0)
    no_baseline = optuna.create_study(direction="maximize")
    no_baseline.add_trials([t for t in handle.study.trials if t.user_attrs.get("arm") == "search"])
    with pytest.raises(InputError, match="has no feasible baseline trial"):
        ev.evaluate(StudyHandle(no_baseline, handle.space, handle.url), WORKLOADS, repeats=1)


def _space(evaluation_workloads=(), context_dir: Path | None = None):
    model = SimpleNamespace(resolved_path=lambda: str(context_dir or "/nonexistent"))
    return SimpleNamespace(name="s", all_workloads=lambda: [Workload(name="default")], model=model,
                           evaluation_workloads=list(evaluation_workloads))


def test_seed_study_set_is_capped_to_the_model_context(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    ws = ev.resolve_workloads("seed-study", _space(context_dir=tmp_path), "/data/sg.json")
    assert [w.name for w in ws] == ["sharegpt", "short-128-4", "medium-2000-100", "long-3896-200",
                                    "very-long-3996-100"]
    assert ws[0].dataset_path == "/data/sg.json" and ws[0].num_prompts == 1000
    assert all(w.seed == 42 for w in ws)
    assert all(w.random_input_len + w.random_output_len <= 4096 for w in ws[1:])
    full = ev.resolve_workloads("seed-study", _space(), "/data/sg.json")
    assert full[-1].name == "very-long-32000-100" and full[-1].num_prompts == 100


def test_workloads_by_name_file_and_space(tmp_path):
    mine = Workload(name="chat", num_prompts=7)
    space = _space([mine])
    assert ev.resolve_workloads("from-space", space) == [mine]
    got = ev.resolve_workloads("chat, short-128-4,default", space)
    assert [w.name for w in got] == ["chat", "short-128-4", "default"]
    f = tmp_path / "w.yaml"
    f.write_text("evaluation_workloads:\n  - {name: a, num_prompts: 3}\n  - {name: b}\n")
    assert [w.name for w in ev.resolve_workloads(str(f), space)] == ["a", "b"]


@pytest.mark.parametrize("spec, message", [
    ("from-space", "space 's' defines no evaluation_workloads"),
    ("seed-study", "seed-study includes ShareGPT: pass --sharegpt PATH"),
    ("sharegpt", "unknown workload 'sharegpt' (pass --sharegpt PATH); known: short-128-4"),
    ("nope", "unknown workload 'nope'"),
    ("default,default", "workload names repeat"),
    (" , ", "names no workload"),
])
def test_bad_workload_specs_are_named(spec, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        ev.resolve_workloads(spec, _space())


def test_bad_workload_file_names_file_and_line(tmp_path):
    f = tmp_path / "w.yaml"
    f.write_text("evaluation_workloads:\n  - {name: a, num_prompts: 0}\n")
    with pytest.raises(InputError, match=r"w.yaml:2: evaluation_workloads.0.num_prompts"):
        ev.resolve_workloads(str(f), _space())


def test_the_evaluate_table_prints_n_beside_each_change(handle, monkeypatch):
    from rich.console import Console

    from tuner.cli import evaluate as evaluate_cli
    monkeypatch.setattr(ev, "run_trial", FakeRunner())
    monkeypatch.setattr(evaluate_cli, "console", Console(record=True, width=250))
    evaluate_cli._print(ev.evaluate(handle, WORKLOADS, repeats=3))
    text = evaluate_cli.console.export_text()
    title = " ".join(text.split("┏")[0].split())  # rich wraps a title to the table's width
    assert title.endswith("3 run(s), change with a 95% interval from Welch's t on the log values "
                          "(none below 3 runs a side)")
    assert "n base/best" in text
    short = [line for line in text.splitlines() if "short-128-4" in line and "total tok/s" in line]
    assert len(short) == 1 and " 3/3 " in short[0] and re.search(r"-\d+\.\d% \[-\d+\.\d, -\d+\.\d\]", short[0])
