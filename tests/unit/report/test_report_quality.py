"""The report of a study with the quality guardrail: the quality column beside the objective, the
winner's quality line, and the configs that failed it grouped by metric (trials answered by
tests.helpers.AnsweringExecutor, recorded by the real driver)."""

from __future__ import annotations

from tests.helpers import AnsweringExecutor, quality_space
from tuner import study as study_mod
from tuner.report import data as report_data
from tuner.report.render import write_report
from tuner.space import load_space

FP32 = [[5, 6, 7, 8], [9, 10, 11, 12]]
BF16 = [[5, 6, 7, 8], [9, 10, 11, 99]]   # mismatch 1/8


def test_the_report_shows_quality_beside_throughput_and_groups_the_failures(tmp_path):
    space = load_space(str(quality_space(tmp_path, {"reference": {"dtype": "float32",
                                                                  "max_num_seqs": 2},
                                                    "probe_reference": True,
                                                    "max_token_mismatch": 0.05})))
    handle = study_mod.create(space, "q", f"sqlite:///{tmp_path / 'q.db'}")
    study_mod.run(handle, executor=AnsweringExecutor({"float32": FP32, "bfloat16": BF16}))
    d = report_data.build(handle.study)
    assert d.quality and d.best.params["dtype"] == "float32"
    assert d.best_quality.startswith("exact_match 1.000, first_divergence 4.000, token_mismatch 0.000")
    assert [t.quality for t in d.trials] == ["reference", "mismatch 0.000",
                                             "mismatch 0.125; over bound: token_mismatch"]
    failed = next(f for f in d.failures if f.kind == "quality-failed")
    assert (failed.failure_class, failed.trials, failed.reason) == (
        "token_mismatch", [2], "past its bound by 0.075 to 0.075")

    md = write_report(handle.study, tmp_path / "r.md", "md").read_text()
    assert "| # | arm | status | total_token_throughput | quality | dtype | max_num_seqs |" in md
    assert "| 2 | bf16-fast | quality-failed | - | mismatch 0.125; over bound: token_mismatch |" in md
    assert "Quality against the reference precision: exact_match 1.000" in md
    html = write_report(handle.study, tmp_path / "r.html").read_text()
    assert '<span class="quality-failed">quality-failed</span>' in html and "<th>quality</th>" in html
