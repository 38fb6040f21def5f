"""`tune best` on synthetic repeated runs (optuna.create_trial: no engine): the change against the
baseline carries its 95 % interval and n from 3 runs a side, and no interval claim below that."""

from __future__ import annotations

import optuna
import pytest
from typer.testing import CliRunner

from tests.helpers import load_run, ok_trial, slo_space
from tuner.cli import app
from tuner.record import schema
from tuner.space import load_space


def _best(tmp_path, base: list[float], best: list[float]) -> str:
    url = f"sqlite:///{tmp_path / 'repeated.db'}"
    study = optuna.create_study(study_name="repeated", storage=url, direction="maximize")
    study.set_user_attr(schema.SPACE, load_space("cpu-smoke").model_dump(mode="json"))
    study.set_user_attr(schema.READY, True)
    for value in base:
        study.add_trial(ok_trial(value, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults"))
    for value in best:
        study.add_trial(ok_trial(value, {"max_num_seqs": 12, "chunked_prefill": True}))
    out = CliRunner().invoke(app, ["best", "repeated", "--storage", url], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    (line,) = [line for line in out.output.splitlines() if line.startswith("vs baseline")]
    return line


def test_three_runs_a_side_print_the_interval_with_n(tmp_path):
    line = _best(tmp_path, [5000.0, 5100.0, 4900.0], [6000.0, 6150.0, 5900.0])
    # values pinned in tests/unit/report/test_report.py (Welch's t on the logs, from scipy)
    assert line == ("vs baseline vllm-defaults: 4,999.33 -> 6,015.79 (geometric means), +20.3%, "
                    "95% CI [+14.9%, +26.0%] (n=3 vs n=3): significant")


@pytest.mark.parametrize("base, best", [([5000.0, 5100.0], [6000.0, 6150.0]),
                                        ([5000.0, 5100.0, 4900.0], [6000.0, 6150.0])])
def test_fewer_than_three_runs_a_side_make_no_95_claim(tmp_path, base, best):
    line = _best(tmp_path, base, best)
    assert f"(n={len(best)} vs n={len(base)}, no interval); `tune confirm` repeats" in line
    assert "95" not in line and "CI" not in line and "significant" not in line


def test_a_max_load_best_says_its_unit_slos_and_what_capped_it(tmp_path):
    """A max-load value is a rate of the first workload, kept within the SLOs; `tune best` names
    both, and the run that bracketed it from above (or that none did)."""
    url = f"sqlite:///{tmp_path / 'slo.db'}"
    study = optuna.create_study(study_name="slo", storage=url, direction="maximize")
    study.set_user_attr(schema.SPACE, slo_space().model_dump(mode="json"))
    study.set_user_attr(schema.READY, True)
    missed_long = [load_run("long", 10, True), load_run("long", 11, False, tpot=59.3)]
    study.add_trial(ok_trial(40.0, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults",
                             max_load=40.0, load_curve=missed_long))
    lines = CliRunner().invoke(app, ["best", "slo", "--storage", url], env={"COLUMNS": "250"}).output
    assert ("load: chat req/s (long at 0.25x) within p99_ttft_ms <= 2000, mean_tpot_ms <= 50; "
            "capped by long at 11: mean_tpot_ms 59.3 > 50") in lines
    study.add_trial(ok_trial(64.0, {"max_num_seqs": 64, "chunked_prefill": True}, max_load=64.0,
                             load_curve=[load_run("chat", 64, True), load_run("long", 16, True)]))
    lines = CliRunner().invoke(app, ["best", "slo", "--storage", url], env={"COLUMNS": "250"}).output
    assert "mean_tpot_ms <= 50; no run missed: the load is the search's top, raise max_load.high" in lines
