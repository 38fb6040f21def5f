"""The max-load-under-SLO bracketing search, on a synthetic server whose p99 TTFT grows with load."""

import pytest

from tuner.errors import InputError
from tuner.space import space_from_dict
from tuner.trial.load_search import EveryWorkload, find_max_load


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


def _two_workload_space(**objective):
    return space_from_dict({
        "name": "mix", "model": {"path": "/nonexistent/model"},
        "engines": {"vllm": {}},
        "workloads": [{"name": "chat", "dataset": "random", "num_prompts": 8},
                      {"name": "long", "dataset": "random", "num_prompts": 8,
                       "random_input_len": 2000, "random_output_len": 100, "load_scale": 0.25}],
        "objective": {"slos": {"p99_ttft_ms": 500}, "aggregate": "worst",
                      "max_load": {"low": 1, "high": 64, "probes": 8}, **objective}})


def test_several_workloads_the_load_every_one_sustains(monkeypatch, tmp_path):
    """One search over the load at which every workload, each at its share (``load_scale``),
    meets the SLOs: the lowest load any workload sustains, in the first workload's units. A
    workload is never run above a load another has already failed, and the one that missed last
    runs first."""
    from types import SimpleNamespace

    from tuner.trial import runner

    capacity = {"chat": 11.0, "long": 2.0}   # long sustains 2 req/s: 8 in chat's units
    sent = []

    def fake_benchmark(config):
        workload, load = config
        sent.append((workload, load))
        ttft = 100.0 if load <= capacity[workload] else 5000.0
        metrics = {"p99_ttft_ms": ttft, "completed": 8, "failed": 0, "request_throughput": load}
        return SimpleNamespace(metrics=metrics, client_saturated=False, to_json=lambda: metrics)

    monkeypatch.setattr(runner, "bench_config",
                        lambda space, w, plan, url: (w.name.split("-")[0], w.request_rate))
    monkeypatch.setattr(runner, "run_benchmark", fake_benchmark)
    space = _two_workload_space()
    outcome = runner.TrialOutcome(plan=None, log_path=tmp_path / "log")
    server = SimpleNamespace(base_url="http://127.0.0.1:1", alive=lambda: True,
                             spec=SimpleNamespace(prefix_cache_reset=None))
    runner._search_max_load(space, None, server, tmp_path, outcome)
    assert sent == [("chat", 1), ("long", 0.25), ("chat", 2), ("long", 0.5), ("chat", 4),
                    ("long", 1), ("chat", 8), ("long", 2), ("chat", 16),   # 16 misses on chat:
                    ("chat", 12),                   # chat, which missed, goes first: one run
                    ("chat", 10), ("long", 2.5),    # chat meets 10, long misses its share
                    ("long", 2.25)]                 # long first now; 8 loads tried
    assert outcome.metrics["max_load"] == 8.0                      # min(11, 2 / 0.25)
    assert outcome.metrics["request_throughput"] == 2.0            # long's run at 8: it binds
    assert outcome.workload_metrics["chat"]["request_throughput"] == 8
    assert outcome.workload_metrics["long"]["max_load"] == 2.0     # in long's own units
    assert outcome.result_path == tmp_path / "bench-long-request_rate-2.json"
    assert [(p["workload"], p["load"], p["met"]) for p in outcome.load_curve][-2:] == [
        ("long", 2.5, False), ("long", 2.25, False)]


def test_a_dead_server_ends_the_search(monkeypatch, tmp_path):
    from types import SimpleNamespace

    from tuner.trial import runner

    sent = []

    def fake_benchmark(config):
        sent.append(config)
        metrics = {"p99_ttft_ms": 100.0, "completed": 8, "failed": 0}
        return SimpleNamespace(metrics=metrics, client_saturated=False, to_json=lambda: metrics)

    monkeypatch.setattr(runner, "bench_config",
                        lambda space, w, plan, url: (w.name.split("-")[0], w.request_rate))
    monkeypatch.setattr(runner, "run_benchmark", fake_benchmark)
    outcome = runner.TrialOutcome(plan=None, log_path=tmp_path / "log")
    server = SimpleNamespace(base_url="http://127.0.0.1:1", alive=lambda: False,
                             spec=SimpleNamespace(prefix_cache_reset=None))
    runner._search_max_load(_two_workload_space(), None, server, tmp_path, outcome)
    assert sent == [("chat", 1), ("long", 0.25)]   # the first load only
    assert outcome.metrics["max_load"] == 1


def test_a_concurrency_share_stays_a_whole_number():
    seen = []

    def measure(load):
        seen.append(load)
        return {"p99_ttft_ms": 100.0 if load <= 3 else 5000.0, "completed": 1, "failed": 0}

    probe = EveryWorkload({"chat": measure, "long": measure}, {"chat": 1.0, "long": 0.25},
                          {"p99_ttft_ms": 500}, integer=True)
    best, _ = find_max_load(probe, low=1, high=64, probes=8, slos={"p99_ttft_ms": 500},
                            integer=True)
    assert best == 3 and all(isinstance(x, int) and x >= 1 for x in seen)
    assert probe.limiting(best) == "chat"


def test_several_workloads_need_the_worst_aggregate():
    with pytest.raises(InputError, match="aggregate: worst"):
        _two_workload_space(aggregate="weighted")


def test_a_probe_offers_its_rate_for_duration_s(monkeypatch, tmp_path):
    """With ``duration_s`` a probe sends rate x duration requests (at least num_prompts), so a
    rate above what the server completes is offered long enough for its queue to show."""
    from types import SimpleNamespace

    from tuner.trial import runner

    sent = []

    def fake_benchmark(config):
        name, rate, n = config
        sent.append((name, rate, n))
        metrics = {"p99_ttft_ms": 100.0 if rate <= 3 else 5000.0, "completed": n, "failed": 0}
        return SimpleNamespace(metrics=metrics, client_saturated=False, to_json=lambda: metrics)

    monkeypatch.setattr(runner, "bench_config",
                        lambda space, w, plan, url: (w.name.split("-")[0], w.request_rate, w.num_prompts))
    monkeypatch.setattr(runner, "run_benchmark", fake_benchmark)
    space = _two_workload_space(max_load={"low": 1, "high": 64, "probes": 4, "duration_s": 10})
    outcome = runner.TrialOutcome(plan=None, log_path=tmp_path / "log")
    server = SimpleNamespace(base_url="http://127.0.0.1:1", alive=lambda: True,
                             spec=SimpleNamespace(prefix_cache_reset=None))
    runner._search_max_load(space, None, server, tmp_path, outcome)
    chat = [(rate, n) for w, rate, n in sent if w == "chat"]
    long = [(rate, n) for w, rate, n in sent if w == "long"]
    assert chat == [(1, 10), (2, 20), (4, 40), (3, 30)]   # 10 s of arrivals at each rate
    assert long == [(0.25, 8), (0.5, 8), (0.75, 8)]      # never fewer than num_prompts (8)


def test_duration_s_needs_a_request_rate():
    with pytest.raises(InputError, match="duration_s applies to knob request_rate"):
        _two_workload_space(max_load={"knob": "max_concurrency", "low": 1, "high": 8,
                                      "duration_s": 10})
