"""benchmarks/client_parity.py's workloads: both clients are given the same request rate, the space's
own unless --request-rate paces it, and a rate that is
not positive is refused before any server starts."""

from __future__ import annotations

import math
import subprocess
import sys

from benchmarks.client_parity import workloads
from tests.helpers import REPO, fixture_space
from tuner.space import load_space


def _rates(w: dict) -> tuple[float, str]:
    return w["ours"]["request_rate"], w["vllm"][w["vllm"].index("--request-rate") + 1]


def test_the_space_workload_keeps_its_rate_unless_paced():
    space = load_space(fixture_space("h200-vllm"))
    own = workloads(200, 0, space)["space"]
    assert _rates(own) == (math.inf, "inf")
    assert (own["prompts"], own["seed"]) == (space.workload.num_prompts, space.workload.seed)
    paced = workloads(200, 0, space, 16.0)["space"]
    assert _rates(paced) == (16.0, "16.0")
    assert {k: v for k, v in paced["ours"].items() if k != "request_rate"} == \
        {k: v for k, v in own["ours"].items() if k != "request_rate"}


def test_a_rate_that_is_not_positive_is_refused_with_exit_2():
    done = subprocess.run([sys.executable, "-m", "benchmarks.client_parity", "--space", fixture_space("h200-vllm"),
                           "--request-rate", "0", "--out", "/nonexistent/f.json"],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "--request-rate must be > 0" in done.stderr
    assert "Traceback" not in done.stderr
