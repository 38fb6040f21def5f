"""Where the launches' time went, as `tune status` and `tune report` show it: trials whose launch
phases were read from the recorded H200 logs (tests/data/logs/launch) by the trial stage's parser."""

from __future__ import annotations

import optuna
import pytest
from typer.testing import CliRunner

from tests.helpers import DATA, ok_trial, refused_trial
from tuner.cli import app
from tuner.engines.spec import load_engine
from tuner.paths import SPACES_DIR
from tuner.record import results, schema
from tuner.report import data as report_data
from tuner.report.render import write_report
from tuner.space import load_space
from tuner.trial.launch_phases import breakdown

optuna.logging.set_verbosity(optuna.logging.WARNING)
LAUNCH = DATA / "logs" / "launch"


def launch_attrs(engine: str, log: str, launch_s: float | None, total_s: float | None) -> dict:
    text = (LAUNCH / log).read_text()
    attrs = {schema.LAUNCH_PHASES: breakdown(load_engine(engine).launch_phases, text, launch_s)}
    if launch_s is not None:
        attrs[schema.LAUNCH_S] = launch_s
        attrs[schema.TIMINGS] = {"ready_s": launch_s, "total_s": total_s}
    return attrs


def launch_study(url: str) -> optuna.Study:
    study = optuna.create_study(study_name="launches", storage=url, direction="maximize")
    study.set_user_attr(schema.SPACE, load_space(str(SPACES_DIR / "cpu-smoke.yaml")).model_dump(mode="json"))
    study.set_user_attr(schema.READY, True)
    study.add_trial(ok_trial(5000.0, {"max_num_seqs": 128, "chunked_prefill": True}, "vllm-defaults",
                             **launch_attrs("vllm", "vllm-0.25.1-h200-compile.log", 122.0, 180.0)))
    study.add_trial(ok_trial(5200.0, {"max_num_seqs": 64, "chunked_prefill": True},
                             **launch_attrs("vllm", "vllm-0.25.1-h200-compile-cache-hit.log",
                                            40.0, 100.0)))
    refused = refused_trial({"max_num_seqs": 8, "chunked_prefill": False}, "out-of-memory",
                            "CUDA out of memory")
    # A refusal that died after loading weights: what it spent, with no launch time.
    refused.user_attrs[schema.LAUNCH_PHASES] = {"weights_s": 3.1}
    study.add_trial(refused)
    study.add_trial(ok_trial(4000.0, {"max_num_seqs": 4, "chunked_prefill": True}))  # no record
    return study


def test_describe_launch_names_only_the_timed_phases():
    hit = launch_attrs("vllm", "vllm-0.25.1-h200-compile-cache-hit.log", 40.0, 100.0)
    # 23.38 - 12.63 - 6 = 4.75 s of profiling and warm-up besides compile and graphs
    assert results.describe_launch(hit) == "40 s (weights 3, compile 13 hit, graphs 6, kv 5)"
    sglang = launch_attrs("sglang", "sglang-0.5.17-h200.log", 140.0, 200.0)
    assert results.describe_launch(sglang) == "140 s (weights 0, graphs 104, kv 0)"
    assert results.describe_launch({schema.LAUNCH_PHASES: {"weights_s": 3.1}}) == "not ready (weights 3)"
    assert results.describe_launch({}) == ""


def test_status_shows_a_launch_column(tmp_path):
    url = f"sqlite:///{tmp_path / 'launches.db'}"
    launch_study(url)
    out = CliRunner().invoke(app, ["status", "launches", "--storage", url], env={"COLUMNS": "250"})
    assert out.exit_code == 0, out.output
    assert "launch" in out.output
    assert "122 s (weights 2, compile 41 miss, graphs 9, kv 23)" in out.output
    assert "40 s (weights 3, compile 13 hit, graphs 6, kv 5)" in out.output
    assert "not ready (weights 3)" in out.output


def test_report_tables_launch_phases_and_their_share(tmp_path):
    study = launch_study(f"sqlite:///{tmp_path / 'launches.db'}")
    data = report_data.build(study)
    assert [r.number for r in data.launches] == [0, 1, 2]   # trial 3 recorded none
    first = data.launches[0]
    assert first.phases["compile_s"] == 41.1 and first.phases["compile_cache_hit"] is False
    assert first.share_pct == pytest.approx(100 * 122 / 180)
    assert data.launches[2].launch_s is None and data.launches[2].share_pct is None
    share, n = data.launch_share
    assert n == 2 and share == pytest.approx(100 * (122 + 40) / (180 + 100))

    md = write_report(study, tmp_path / "r.md", "md").read_text()
    assert "## Where the launches' time went" in md
    assert "Launching the engine took 58 % of the trials' time (2 trials" in md
    assert "| 0 | vllm-defaults | 122.0 | 2.1 | 41.1 | miss |  | 9.0 | 23.5 | 46.3 | 68 |" in md
    assert "| 1 | search | 40.0 | 3.5 | 12.6 | hit |  | 6.0 | 4.8 | 13.2 | 40 |" in md
    assert "| 2 | search | not ready | 3.1 |  |  |  |  |  |  |  |" in md

    html = write_report(study, tmp_path / "r.html").read_text()
    assert 'id="launches"' in html and "Launching the engine took 58 %" in html
    assert '<td class="num">41.1</td><td>miss</td>' in html
