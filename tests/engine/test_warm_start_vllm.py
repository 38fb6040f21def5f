"""`tune start --warm-start` on the real vLLM CPU engine: a study on another workload queues the
earlier study's best configs first, and records where its prior came from and what differs."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers import load, run_tune, small_space
from tuner.record import schema

pytestmark = pytest.mark.engine


def test_a_warm_started_study_queues_the_earlier_best_configs_first(tmp_path, studies, vllm_bin,
                                                                    tiny_model_path):
    first = small_space(tmp_path, num_prompts=16, n_trials=2, baselines=[], name="earlier")
    proc = run_tune("start", "--space", str(first))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    earlier = load(studies, "earlier")
    served = sorted((t for t in earlier.trials if schema.is_feasible(t) and schema.launched(t)),
                    key=lambda t: t.value, reverse=True)
    assert served, "the earlier study served nothing"

    # One trial: it can only be the earlier best's config if the warm start queued that first.
    second = small_space(tmp_path, num_prompts=24, n_trials=1, baselines=[], name="later")
    data = yaml.safe_load(second.read_text())
    data["workload"]["random_output_len"] = 16  # another workload: the prior's ratio is learned
    second.write_text(yaml.safe_dump(data))
    proc = run_tune("start", "--space", str(second), "--warm-start", "earlier")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    later = load(studies, "later")
    warm = [t for t in later.trials if t.user_attrs.get(schema.WARM_START_OF)]
    assert warm and warm[0].number == 0  # first in line
    assert warm[0].user_attrs[schema.WARM_START_OF] == f"earlier#{served[0].number}"
    assert warm[0].params == served[0].params
    (source,) = later.user_attrs[schema.PRIOR]["sources"]
    assert source["study"] == "earlier" and source["measured"] == len(served)
    assert "workload" in source["differs"]
    assert "prior: study earlier" in proc.stdout
