"""benchmarks/calibrate.py on the peer's measured H200 grid (benchmarks/data/grid-vllm-h200.json,
`vllm bench sweep serve`'s own runs): one row per config, measured as the median of its runs, the
prediction from the real performance model for the config as launched."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

from benchmarks import calibrate
from tests.helpers import REPO

GRID = REPO / "benchmarks" / "data" / "grid-vllm-h200.json"


def test_a_grid_config_is_one_row_measured_as_the_median_of_its_runs():
    space, rows = calibrate.grid_configs(GRID)
    doc = json.loads(GRID.read_text())
    assert space == "h200-vllm-grid" and len(rows) == len(doc["points"])
    assert {r["engine"] for r in rows} == {"vllm"}
    for row, point in zip(rows, doc["points"]):
        runs = [r["value"] for launch in point["launches"] for r in launch["full"]]
        assert row["measured"] == statistics.median(runs) and len(runs) >= 3
        assert row["knobs"]["max_seq_len"] == 16384     # as launched: the space's fixed knob too


def test_the_gap_of_the_grid_is_reported_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))   # the model's shape is written there
    out = tmp_path / "gap.json"
    subprocess.run([sys.executable, "benchmarks/calibrate.py", "--grid", str(GRID), "--gpu", "h200-141gb",
                    "--out", str(out)], cwd=REPO, check=True, capture_output=True,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    doc = json.loads(out.read_text())
    assert doc["by_source"]["sweep:grid-vllm-h200"] == doc["gap"]
    g = doc["gap"]["vllm"]
    assert g["n"] == len(json.loads(GRID.read_text())["points"])
    assert 0.2 < g["bias"] < 0.8 and g["sigma_log"] > 0   # the model's ~2x optimism on vLLM


def test_online_fp8s_step_is_the_ratio_of_the_halves_geometric_means():
    rows = [{"knobs": {"quantization": q}, "measured": m, "predicted": p}
            for q, m, p in [("fp8", 120.0, 300.0), ("fp8", 150.0, 330.0), ("none", 100.0, 250.0),
                            ("none", 90.0, 240.0)]]
    step = calibrate.fp8_step(rows)
    assert step["n_fp8"] == step["n_bf16"] == 2
    assert step["measured"] == pytest.approx((120 * 150) ** 0.5 / (100 * 90) ** 0.5)
    assert step["predicted"] == pytest.approx((300 * 330) ** 0.5 / (250 * 240) ** 0.5)
    assert calibrate.fp8_step(rows[2:]) is None          # one half only: no step


def test_rho_within_each_engine_and_quantization_ignores_the_step_between_them():
    # Across the halves the order is perfect (the FP8 step); within each the model orders backwards.
    rows = [{"engine": "vllm", "quantization": q, "measured": m, "predicted": p}
            for q, m, p in [("fp8", 130.0, 300.0), ("fp8", 140.0, 290.0), ("fp8", 150.0, 280.0),
                            ("none", 100.0, 250.0), ("none", 105.0, 240.0), ("none", 110.0, 230.0),
                            ("awq", 90.0, None)]]
    within = calibrate.within_quantization(rows)["vllm"]
    assert within["fp8"]["spearman_rho"] == pytest.approx(-1.0)
    assert within["none"]["spearman_rho"] == pytest.approx(-1.0)
    assert within["awq"] == {"n": 0, "distinct_predictions": 0, "spearman_rho": None}


def test_a_config_left_at_the_engines_default_counts_with_the_spaces_default_quantization():
    from tuner.space import load_space
    space = load_space("h200-vllm-grid")
    assert calibrate.quantization(space, "vllm", {}) == "none"
    assert calibrate.quantization(space, "vllm", {"quantization": "fp8"}) == "fp8"
