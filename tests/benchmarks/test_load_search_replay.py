"""benchmarks.load_search_replay: a trial's recorded runs answer today's search, and a run the
trial did not record is inferred by monotonicity or ends the replay."""

import json

from benchmarks import load_search_replay as lsr
from tuner.space import MaxLoad

SLOS = {"p99_ttft_ms": 2000}


def _write(folder, workload, load, ttft, duration):
    (folder / f"bench-{workload}-request_rate-{load:g}.json").write_text(json.dumps(
        {"duration": duration, "p99_ttft_ms": ttft, "completed": 8, "failed": 0}))


def test_a_recorded_trial_replays_with_fewer_runs_and_the_same_value(tmp_path):
    # chat was searched on its own up to 64 (met everywhere, far from its bound); long, near its
    # bound where it met, missed at 16, 12 and 11 (x4: 64, 48, 44)
    for load in (16, 32, 64):
        _write(tmp_path, "chat", load, 100, 20.0)
    for load, ttft in ((4, 1900), (8, 1900), (16, 5000), (12, 5000), (10, 1900), (11, 5000)):
        _write(tmp_path, "long", load, ttft, 10.0)
    runs = lsr.recorded_runs(tmp_path, "request_rate")
    assert sorted(runs["long"]) == [4, 8, 10, 11, 12, 16]
    out = lsr.replay_trial(runs, {"chat": 1.0, "long": 0.25}, SLOS,
                           MaxLoad(low=16, high=256, probes=6))["replayed"]
    # 16 and 32: both; 64, 48, 44: long, nearer its bound, misses first (one run each); 40: long,
    # then chat at 40, never recorded: it met at 64, so it meets at 40 (inferred, at chat's median
    # of 20 s)
    assert out == {"value": 40, "runs": 9, "inferred_runs": 1, "run_seconds": 3 * 20.0 + 6 * 10.0}


def test_a_run_the_record_cannot_decide_ends_the_replay(tmp_path):
    _write(tmp_path, "chat", 16, 100, 20.0)
    _write(tmp_path, "long", 4, 100, 10.0)
    out = lsr.replay_trial(lsr.recorded_runs(tmp_path, "request_rate"), {"chat": 1.0, "long": 0.25},
                           SLOS, MaxLoad(low=16, high=256, probes=6))
    assert out == {"replayed": None, "undecided_run": "chat at 32"}
