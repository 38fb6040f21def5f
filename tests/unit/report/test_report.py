"""Report tables from a synthetic study (optuna.create_trial: no engine), HTML and Markdown output."""

from __future__ import annotations

import math
import re

import optuna
import pytest
from optuna.trial import create_trial
from typer.testing import CliRunner

from tests.helpers import DIST, evaluation_doc, ok_trial, report_study
from tuner.cli import app
from tuner.report import data as report_data
from tuner.report.render import write_report
from tuner.report.stats import change, t_quantile

optuna.logging.set_verbosity(optuna.logging.WARNING)










# ---- statistics --------------------------------------------------------------------------------

@pytest.mark.parametrize("df, expected", [(1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228),
                                          (3, 3.182), (5, 2.571), (1000, 1.962)])
def test_t_quantile_matches_tables(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=2e-3)


def test_change_interval_covers_the_ratio_and_says_when_it_cannot():
    c = change([100, 102, 98], [110, 112, 108])
    assert c.pct == pytest.approx(10.0, abs=0.1) and c.low < c.pct < c.high and c.low > 0
    assert c.text().startswith("+10.0% [+")
    assert change([100], [110]).text() == "+10.0% (n=1, no interval)"
    assert change([100, 100], [110]).note == "n=1, no interval"
    assert change([], [1]).text() == "not measured"
    noisy = change([100, 140, 70], [110, 150, 80])
    assert noisy.low < 0 < noisy.high  # noise larger than the gain: not a claim


# ---- tables ------------------------------------------------------------------------------------

def test_tables_from_search_trials_only():
    d = report_data.build(report_study())
    assert d.best.number == 5 and d.best.value == 6100.0
    assert d.best_command == "vllm serve m --max-num-seqs 31"
    assert d.counts == {"ok": 5, "infeasible": 1, "pruned": 1, "reused": 1}
    assert d.baseline_arm == "vllm-defaults" and d.contender == 5
    assert d.comparison_source == ("search: trial 5 (1 run(s)) vs trial 0 (1 run(s)); `tune "
                                   "confirm` or `tune evaluate` adds repeats and intervals")
    tput = d.workload_rows[0]
    assert (tput.workload, tput.label) == ("chat", "total tok/s")
    assert (tput.baseline, tput.best) == (pytest.approx(5000.0), pytest.approx(6100.0))
    assert tput.change.text() == "+22.0% (n=1, no interval)"
    classes = {(f.kind, f.failure_class): f for f in d.failures}
    refused = classes[("infeasible", "invalid-config")]
    assert refused.trials == [1] and "smaller than max_model_len" in refused.evidence[0]
    assert classes[("pruned", "known-infeasible")].reason == "like trial 1 (invalid-config)"
    assert len(d.failures) == 2  # the reused trial is no failure
    assert d.trials[-1].status == "reused" and d.trials[-1].failure == "= trial 5"
    assert d.environment["engine_version"] == "0.32.0"
    assert set(d.importances) == {"max_num_seqs", "chunked_prefill"}
    assert math.isclose(sum(d.importances.values()), 1.0)
    tel = d.telemetry[0]
    assert (tel.number, tel.device, tel.peak_memory_mib, tel.mean_load_pct) == (0, "CPU", 2400.0,
                                                                                180.0)
    assert tel.peak_kv_cache_pct == pytest.approx(3.1) and tel.mean_queue_ms == pytest.approx(3690)
    assert tel.energy_j_per_token is None


def test_tables_from_an_evaluation_with_repeats():
    d = report_data.build(report_study(evaluation=evaluation_doc([5000, 5100, 4900], [6000, 6150, 5900])))
    assert "3 repeat(s) each" in d.comparison_source
    short = [r for r in d.workload_rows if r.workload == "short-128-4"]
    assert [r.label for r in short] == ["total tok/s", "output tok/s", "mean TPOT ms",
                                        "p99 TTFT ms"]
    assert short[0].change.low > 0 and re.match(r"\+20\.\d% \[\+\d+\.\d, \+\d+\.\d\]",
                                                short[0].change.text())
    assert short[2].change.text() == "+0.0% [+0.0, +0.0]"
    long = [r for r in d.workload_rows if r.workload == "long-1900-100"][0]
    assert long.failed_requests == 30 and long.change.text() == "not measured"


def test_baseline_best_compares_the_best_searched_config():
    study = optuna.create_study(direction="maximize")
    study.add_trial(ok_trial(9000.0, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults"))
    study.add_trial(ok_trial(7000.0, {"max_num_seqs": 12, "chunked_prefill": True}))
    study.add_trial(ok_trial(8000.0, {"max_num_seqs": 19, "chunked_prefill": True}))
    d = report_data.build(study)
    assert d.best.number == 0 and d.contender == 2
    assert any("the best searched config, trial 2" in n for n in d.notes)
    assert d.workload_rows[0].change.pct == pytest.approx(-11.1, abs=0.05)


def test_confirm_repeats_give_the_search_comparison_an_interval(tmp_path):
    study = optuna.create_study(direction="maximize")
    defaults = {"max_num_seqs": 128, "chunked_prefill": True}
    tuned = {"max_num_seqs": 12, "chunked_prefill": True}
    for value in (5000.0, 5100.0):
        study.add_trial(ok_trial(value, defaults, "vllm-defaults"))
    for value in (6000.0, 6050.0, 5950.0):
        study.add_trial(ok_trial(value, tuned))
    d = report_data.build(study)
    tput = d.workload_rows[0]
    assert (tput.change.n_base, tput.change.n_best) == (2, 3) and tput.change.low > 0
    assert d.comparison_source == "search: trial 2 (3 run(s)) vs trial 0 (2 run(s))"
    text = write_report(study, tmp_path / "r.md", "md").read_text()
    assert "Best feasible config: trial 2 (search), value = **6,000.0** (median of 3 runs);" in text


def test_search_comparison_covers_every_search_workload():
    study = optuna.create_study(direction="maximize")
    study.set_user_attr("space", {"workloads": [{"name": "chat"}, {"name": "rag"}]})
    per = {"chat": {"total_token_throughput": 100.0, "failed": 0},
           "rag": {"total_token_throughput": 50.0, "failed": 2}}
    study.add_trial(ok_trial(75.0, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults",
                        workload_metrics=per))
    study.add_trial(ok_trial(90.0, {"max_num_seqs": 12, "chunked_prefill": True},
                        workload_metrics={"chat": {"total_token_throughput": 150.0},
                                          "rag": {"total_token_throughput": 40.0}}))
    rows = [r for r in report_data.build(study).workload_rows if r.label == "total tok/s"]
    assert [(r.workload, r.change.text(), r.failed_requests) for r in rows] == [
        ("chat", "+50.0% (n=1, no interval)", 0), ("rag", "-20.0% (n=1, no interval)", 2)]


def test_slo_violations_are_a_failure_group_and_not_best():
    study = optuna.create_study(direction="maximize")
    study.add_trial(ok_trial(5000.0, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults"))
    fast = ok_trial(9000.0, {"max_num_seqs": 64, "chunked_prefill": True}, slo_ok=False,
               slo_slack={"p99_ttft_ms": 250.0})
    study.add_trial(create_trial(value=9000.0, params=fast.params, distributions=DIST,
                                 user_attrs=fast.user_attrs,
                                 system_attrs={"constraints:engine_start": 0.0,
                                               "constraints:slo:p99_ttft_ms": 250.0}))
    d = report_data.build(study)
    assert d.best.number == 0 and d.counts == {"ok": 1, "slo-violated": 1}
    (group,) = d.failures
    assert (group.kind, group.failure_class, group.trials) == ("slo-violated", "p99_ttft_ms", [1])
    assert group.reason == "over its bound by 250.0 to 250.0 (worst workload)"


def test_too_few_trials_for_importances_is_said_not_raised():
    d = report_data.build(report_study(n_search=1))
    assert d.importances == {} and "too few for parameter importances" in d.importance_note


def test_multi_objective_study_gets_a_pareto_front(tmp_path):
    study = optuna.create_study(directions=["maximize", "minimize"])
    with pytest.warns(optuna.exceptions.ExperimentalWarning):
        study.set_metric_names(["total_token_throughput", "p99_ttft_ms"])
    for i, (tput, ttft) in enumerate([(5000, 300), (6000, 500), (5500, 250), (4000, 600)]):
        study.add_trial(create_trial(values=[tput, ttft], params={"max_num_seqs": 4 + i,
                                                                  "chunked_prefill": True},
                                     distributions=DIST, user_attrs={"arm": "search"}))
    d = report_data.build(study)
    assert d.best is None and d.pareto == [1, 2] and any("Pareto front" in n for n in d.notes)
    out = write_report(study, tmp_path / "r.html")
    text = out.read_text()
    assert 'id="plot-pareto"' in text and "Parameter importances" not in text
    assert "Pick from the Pareto front: trials 1, 2" in text


# ---- output ------------------------------------------------------------------------------------

def test_html_is_self_contained_with_tables_and_plots(tmp_path):
    out = write_report(report_study(evaluation=evaluation_doc([5000, 5100, 4900], [6000, 6150, 5900])),
                       tmp_path / "deep" / "report.html")
    text = out.read_text()
    assert "<script src=" not in text and "cdn" not in text.lower().split("</script>")[-1]
    assert "plotly" in text[:200_000]  # the library is inlined in <head>
    for div in ("plot-history", "plot-parallel", "plot-importance"):
        assert f'id="{div}"' in text
    for table in ("workloads", "failures", "telemetry", "trials", "environment"):
        assert f'<table class="{table}">' in text
    assert "vllm serve m --max-num-seqs 31" in text
    assert 'class="good">+20.' in text  # interval above zero: coloured as a gain
    assert [p.name for p in out.parent.iterdir()] == ["report.html"]  # no temp file left


def test_markdown_has_the_same_tables(tmp_path):
    text = write_report(report_study(), tmp_path / "r.md", "md").read_text()
    assert "| chat | total tok/s | 5,000.0 | 6,100.0 | +22.0% (n=1, no interval) | 1/1 |  |" in text
    assert "```bash\nvllm serve m --max-num-seqs 31\n```" in text
    assert "| infeasible | invalid-config | 1 | vLLM rejected the combination of arguments |" in text
    assert "| pruned | known-infeasible | 6 | like trial 1 (invalid-config) |" in text
    assert "| 0 | vllm-defaults | CPU | - | 2,400.0 | 180.0 | 3.1 | 126.0 | 0 | 3,690.0 |" in text
    assert "| engine_version | 0.32.0 |" in text


def test_report_command_writes_and_names_bad_input(tmp_path, studies):
    url = f"sqlite:///{studies / 'synthetic.db'}"
    studies.mkdir()
    report_study(url)
    app.command("noop")(lambda: None)
    runner = CliRunner()
    out = tmp_path / "x.md"
    r = runner.invoke(app, ["report", "synthetic", "--format", "md", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("# synthetic: tuning report")
    r = runner.invoke(app, ["report", "synthetic", "--format", "pdf"])
    assert r.exit_code == 2 and "unknown report format 'pdf'; choose one of html, md" in r.output
    r = runner.invoke(app, ["report", "nope"])
    assert r.exit_code == 2 and "no study named 'nope'" in r.output and "nope.db" in r.output


@pytest.mark.engine
def test_report_of_a_real_study(real_study, tmp_path):
    studies, name = real_study
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{studies / (name + '.db')}")
    text = write_report(study, tmp_path / "real.md", "md").read_text()
    assert "--served-model-name tiny-qwen3" in text
    assert "| infeasible | invalid-config | " in text and "smaller than max_model_len" in text
    assert "## Telemetry" in text and "| vllm-defaults | CPU |" in text
    assert "| engine_version | 0.32.0 |" in text
    html = write_report(study, tmp_path / "real.html").read_text()
    assert 'id="plot-history"' in html
