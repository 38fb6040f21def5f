"""The max-load-under-SLO bracketing search, on a synthetic server whose p99 TTFT grows with load."""

import pytest

from tuner.errors import InputError
from tuner.space import space_from_dict
from tuner.trial.load_search import find_max_load


def server(capacity: float):
    """p99 TTFT stays at 100 ms up to ``capacity`` req/s, then explodes."""
    calls = []

    def measure(load):
        calls.append(load)
        return {"p99_ttft_ms": 100.0 if load <= capacity else 100.0 * load / capacity * 20,
                "completed": 10, "failed": 0}
    return measure, calls


def test_doubles_then_bisects_to_the_largest_load_meeting_the_slo():
    measure, calls = server(capacity=11.0)
    best, curve = find_max_load(measure, low=1, high=64, probes=8, slos={"p99_ttft_ms": 500},
                                integer=False)
    assert calls[:5] == [1, 2, 4, 8, 16]          # doubling until the SLO breaks
    assert calls[5:] == [12.0, 10.0, 11.0]        # then bisection between 8 and 16
    assert best == 11.0 and [p.met for p in curve][-1]


def test_integer_loads_stop_when_the_bracket_closes():
    measure, calls = server(capacity=5)
    best, _ = find_max_load(measure, low=1, high=64, probes=20, slos={"p99_ttft_ms": 500},
                            integer=True)
    assert best == 5 and calls == [1, 2, 4, 8, 6, 5]


def test_no_load_meets_the_slo_and_high_caps_the_search():
    measure, calls = server(capacity=0.5)
    assert find_max_load(measure, low=1, high=64, probes=8, slos={"p99_ttft_ms": 500},
                         integer=False)[0] == 0.0
    assert calls == [1]
    measure, calls = server(capacity=1000)
    assert find_max_load(measure, low=1, high=6, probes=8, slos={"p99_ttft_ms": 500},
                         integer=False)[0] == 6
    assert calls == [1, 2, 4, 6]


def test_failed_requests_count_against_an_slo():
    best, _ = find_max_load(lambda load: {"completed": 5, "failed": 5}, low=1, high=4, probes=4,
                            slos={"failed_pct": 1.0}, integer=False)
    assert best == 0.0


def test_max_load_needs_slos():
    with pytest.raises(InputError, match="max_load needs slos"):
        space_from_dict({"name": "x", "model": {"path": "/m"}, "engines": {"vllm": {}},
                         "objective": {"max_load": {"low": 1, "high": 8}}})
