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
from tuner.report.stats import change, log_t_interval, t_quantile

optuna.logging.set_verbosity(optuna.logging.WARNING)










# ---- statistics --------------------------------------------------------------------------------
# The one interval method (tuner.report.stats.log_t_interval). The expected values below were not
# computed with the code under test: the t quantiles are the two-sided 95 % critical values of
# NIST/SEMATECH e-Handbook of Statistical Methods, 1.3.6.7.2 "Critical Values of the Student's t
# Distribution" (https://www.itl.nist.gov/div898/handbook/eda/section3/eda3672.htm); the
# intervals are scipy 1.17's, on the natural logs of the values:
#   scipy.stats.ttest_ind(log(best), log(base), equal_var=False).confidence_interval(0.95)
#   scipy.stats.t.interval(0.95, n - 1, loc=mean(log(x)), scale=sem(log(x)))
# then exponentiated.

@pytest.mark.parametrize("df, expected", [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776),
                                          (5, 2.571), (10, 2.228), (30, 2.042), (100, 1.984)])
def test_t_quantile_matches_the_nist_table(df, expected):
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=1e-3)


def test_three_runs_a_side_get_welchs_interval_on_the_log_ratio():
    base, best = [5000.0, 5100.0, 4900.0], [6000.0, 6150.0, 5900.0]
    iv = log_t_interval(best, base)
    assert iv.n == (3, 3) and iv.note == ""
    assert iv.value == pytest.approx(1.2033188, rel=1e-6)  # ratio of geometric means
    assert (iv.low, iv.high) == (pytest.approx(1.1487864, rel=1e-6), pytest.approx(1.2604399, rel=1e-6))
    c = change(base, best)
    assert (c.pct, c.low, c.high) == (pytest.approx(20.33188, rel=1e-5),
                                      pytest.approx(14.87864, rel=1e-5), pytest.approx(26.04399, rel=1e-5))
    assert c.text() == "+20.3% [+14.9, +26.0]"
    assert c.describe() == "+20.3%, 95% CI [+14.9%, +26.0%] (n=3 vs n=3): significant"


def test_unequal_spreads_and_sizes_use_welch_satterthwaite_degrees_of_freedom():
    # df = 2.2955 here; a pooled-variance t (df 5) would claim [1.054, 1.346], excluding 1
    iv = log_t_interval([120.0, 131.0, 109.0], [100.0, 104.0, 97.0, 101.0])
    assert iv.n == (3, 4)
    assert (iv.low, iv.high) == (pytest.approx(0.9657059, rel=1e-6), pytest.approx(1.4689643, rel=1e-6))
    assert change([100.0, 104.0, 97.0, 101.0], [120.0, 131.0, 109.0]).significant is False


def test_one_arm_gets_a_t_interval_of_its_geometric_mean():
    iv = log_t_interval([100.0, 105.0, 95.0])
    assert iv.n == (3,) and iv.value == pytest.approx(99.916597, rel=1e-6)
    assert (iv.low, iv.high) == (pytest.approx(88.235758, rel=1e-6), pytest.approx(113.14377, rel=1e-6))
    assert log_t_interval([100.0, 105.0]).low is None


def test_two_runs_a_side_make_no_interval_claim():
    """2 vs 2 would give a t quantile of about 4.3 to 12.7: no 95 % claim, only the point value."""
    c = change([5000.0, 5100.0], [6000.0, 6150.0])
    assert c.pct == pytest.approx(100 * (math.sqrt(6000 * 6150) / math.sqrt(5000 * 5100) - 1))
    assert (c.low, c.high, c.significant) == (None, None, None)
    assert c.text() == "+20.3% (n=2, no interval)"
    assert c.describe() == "+20.3% (n=2 vs n=2, no interval)"
    assert "95" not in c.text() + c.describe()
    assert change([100, 102, 98], [110, 112]).note == "n=2, no interval"  # the smaller side counts


def test_change_without_an_interval_says_why():
    assert change([100], [110]).text() == "+10.0% (n=1, no interval)"
    assert change([], [1]).text() == "not measured"
    zero = change([0.0, 2.0, 4.0], [3.0, 3.0, 3.0])
    assert (zero.base, zero.best, zero.pct) == (2.0, 3.0, 50.0) and zero.low is None
    assert zero.text() == "+50.0% (a value <= 0, no interval)" and zero.means == "means"
    noisy = change([100, 140, 70], [110, 150, 80])
    assert noisy.low < 0 < noisy.high and not noisy.significant  # noise larger than the gain


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


def _repeated_study(base: list[float], best: list[float]) -> optuna.Study:
    study = optuna.create_study(direction="maximize")
    for value in base:
        study.add_trial(ok_trial(value, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults"))
    for value in best:
        study.add_trial(ok_trial(value, {"max_num_seqs": 12, "chunked_prefill": True}))
    return study


def test_confirm_repeats_give_the_search_comparison_an_interval(tmp_path):
    study = _repeated_study([5000.0, 5100.0, 4900.0], [6000.0, 6150.0, 5900.0])
    d = report_data.build(study)
    tput = d.workload_rows[0]
    assert (tput.change.n_base, tput.change.n_best) == (3, 3)
    assert tput.change.text() == "+20.3% [+14.9, +26.0]"  # pinned in the statistics tests above
    assert d.comparison_source == "search: trial 3 (3 run(s)) vs trial 0 (3 run(s))"
    text = write_report(study, tmp_path / "r.md", "md").read_text()
    assert "Best feasible config: trial 3 (search), value = **6,000.0** (median of 3 runs);" in text
    assert "| default | total tok/s | 4,999.3 | 6,015.8 | +20.3% [+14.9, +26.0] | 3/3 |  |" in text
    assert "95% interval from Welch's t on the log values (none below 3 runs a side)" in text
    html = write_report(study, tmp_path / "r.html").read_text()
    assert 'class="good">+20.3% [+14.9, +26.0]</span></td><td>3/3</td>' in html


def test_two_runs_a_side_get_no_interval_in_the_report(tmp_path):
    study = _repeated_study([5000.0, 5100.0], [6000.0, 6150.0])
    d = report_data.build(study)
    assert d.comparison_source.endswith("`tune confirm` or `tune evaluate` adds repeats and intervals")
    text = write_report(study, tmp_path / "r.md", "md").read_text()
    assert "| default | total tok/s | 5,049.8 | 6,074.5 | +20.3% (n=2, no interval) | 2/2 |  |" in text
    html = write_report(study, tmp_path / "r.html").read_text()
    assert '<span class="">+20.3% (n=2, no interval)</span></td><td>2/2</td>' in html


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
    studies, name, _ = real_study
    study = optuna.load_study(study_name=name, storage=f"sqlite:///{studies / (name + '.db')}")
    text = write_report(study, tmp_path / "real.md", "md").read_text()
    assert "--served-model-name tiny-qwen3" in text
    assert "| infeasible | invalid-config | " in text and "smaller than max_model_len" in text
    assert "## Telemetry" in text and "| vllm-defaults | CPU |" in text
    assert "| engine_version | 0.32.0 |" in text
    html = write_report(study, tmp_path / "real.html").read_text()
    assert 'id="plot-history"' in html


def test_a_max_load_study_says_what_capped_each_config(tmp_path):
    """The load each config sustained inside the SLOs, and the run that bracketed it from above:
    the miss at the lowest load in the first workload's units (a workload runs at its load_scale
    share), whichever order the runs came in."""
    from tests.helpers import load_run as run, slo_space

    study = optuna.create_study(study_name="slo", direction="maximize")
    study.set_user_attr("space", slo_space().model_dump(mode="json"))

    # each workload searched on its own, long first: long misses at 11 (44 in chat's units), then
    # chat at 192: the later miss is not what capped the load
    curve = [run("long", 10, True), run("long", 11, False, tpot=59.3),
             run("chat", 128, True), run("chat", 192, False, ttft=2500.0)]
    study.add_trial(ok_trial(40.0, {"max_num_seqs": 128, "chunked_prefill": True},
                             "vllm-defaults", load_curve=curve, max_load=40.0))
    study.add_trial(ok_trial(64.0, {"max_num_seqs": 64, "chunked_prefill": True},
                             load_curve=[run("chat", 64, True), run("long", 16, True)], max_load=64.0))
    data = report_data.build(study)
    assert [(r.number, r.sustained, r.capped_by, r.runs) for r in data.loads] == [
        (0, 40.0, "long at 11: mean_tpot_ms 59.3 > 50", 4),
        (1, 64.0, "", 2)]
    out = tmp_path / "r.md"
    write_report(study, out, "md")
    text = out.read_text()
    assert "## Load within the SLOs" in text
    assert "| 1 | search | 64.0 | no run missed | 2 |" in text
    # the per-workload table compares each config at its own sustained load
    assert "each config's metrics are its runs at the load it sustained (40 and 64)" in text
