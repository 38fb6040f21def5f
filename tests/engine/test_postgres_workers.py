"""Four independent `tune start` workers share one study on a real PostgreSQL server, each launching
real vLLM CPU servers: no trial duplicated or lost, each baseline run once."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import optuna
import pytest

from tests import postgres
from tests.helpers import small_space
from tuner.record import schema

pytestmark = [pytest.mark.engine,
              pytest.mark.skipif(not postgres.available(), reason="PostgreSQL binaries not found")]
TUNE = os.path.join(os.path.dirname(sys.executable), "tune")


def test_four_workers_share_one_study(tmp_path, studies, vllm_bin, tiny_model_path):
    # As many trials as workers: every worker asks at once, so each ask races the other three.
    space = small_space(tmp_path, num_prompts=8, n_trials=4, name="shared")
    with postgres.cluster() as pg:
        url = pg.url
        workers = [subprocess.Popen([TUNE, "start", "--space", str(space), "--study", "shared",
                                     "--storage", url], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True) for _ in range(4)]
        outputs = [w.communicate(timeout=1200)[0] for w in workers]
        assert [w.returncode for w in workers] == [0] * 4, "\n\n".join(outputs)
        study = optuna.load_study(study_name="shared", storage=url)
        trials = study.get_trials()

    finished = [t for t in trials if t.state in (optuna.trial.TrialState.COMPLETE,
                                                 optuna.trial.TrialState.PRUNED)]
    # Configs pruned by a rule, or measured before, cost no launch and no budget. Workers check
    # the budget before asking for a trial, so at most workers-1 extra launches can start near
    # the end.
    launched = [t for t in finished if schema.launched(t)]
    assert 4 <= len(launched) <= 7, [(t.number, t.state) for t in trials]
    assert not [t for t in trials if t.state in (optuna.trial.TrialState.RUNNING,
                                                 optuna.trial.TrialState.WAITING)]
    arms = Counter(t.user_attrs.get("arm") for t in finished)
    assert arms["vllm-defaults"] == 1 and arms["probe-invalid"] == 1
    # every worker took part, and no trial number was run twice
    assert len({t.user_attrs["worker_pid"] for t in finished}) >= 2
    assert len({t.number for t in trials}) == len(trials)


def test_storage_outage_mid_study_then_resume(tmp_path, studies, vllm_bin, tiny_model_path):
    from tests.helpers import wait_for
    from tuner.runtime import orphans
    space = small_space(tmp_path, num_prompts=400, n_trials=1, name="outage",
                        baselines=[{"name": "vllm-defaults", "engine": "vllm"}])
    with postgres.cluster() as pg:
        tune = subprocess.Popen([TUNE, "start", "--space", str(space), "--storage", pg.url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        log = studies / "outage-files" / "trials" / "trial-0000" / "server.log"
        wait_for(lambda: log.exists() and "POST /v1/completions" in log.read_text(errors="replace"),
                  300, "the benchmark", tune)
        pg.stop()  # the database goes away while the benchmark runs
        out, errs = tune.communicate(timeout=600)
        assert tune.returncode == 1, out + errs
        assert f"the study storage {pg.url} became unavailable" in errs
        assert "tune resume outage" in errs
        assert orphans.orphans() == []

        pg.start()
        resumed = subprocess.run([TUNE, "resume", "outage", "--storage", pg.url],
                                 capture_output=True, text=True, timeout=900)
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        study = optuna.load_study(study_name="outage", storage=pg.url)
        complete = [t for t in study.trials
                    if t.state == optuna.trial.TrialState.COMPLETE and schema.launched(t)]
        assert [t.user_attrs.get("retry_of") for t in complete] == [0]  # the budget: its retry
