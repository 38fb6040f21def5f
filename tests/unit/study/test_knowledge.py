"""Prior knowledge in a real study: the space's prior: asks the real AIConfigurator package, the
study queues the model's pick and the best predictions, and a warm start queues an earlier study's
best configs; workers that load the study rebuild the same prior sampler."""

from __future__ import annotations

import sys

import optuna
import pytest
import yaml
from optuna.distributions import CategoricalDistribution
from optuna.trial import create_trial

from tuner.paths import SPACES_DIR
from tuner.record import schema
from tuner.record.storage import default_url, open_storage
from tuner.space import space_from_dict
from tuner.study import create, load
from tuner.study.prior import PriorSampler

pytest.importorskip("aiconfigurator_core", reason="the estimate extra (aiconfigurator-core) is not installed")


def _a100_space(**over):
    data = yaml.safe_load((SPACES_DIR / "a100-throughput.yaml").read_text())
    for choice in data["engines"].values():
        choice.pop("container")
        choice["command"] = [sys.executable]  # nothing is launched here
    data.update(over)
    return space_from_dict(data)


def test_a_prior_queues_the_model_pick_and_diverse_seeds(studies):
    space = _a100_space(prior={"gpu": "a100-sxm-80gb", "candidates": 30, "seeds": 3})
    handle = create(space, "prior", default_url("prior"))
    prior = handle.study.user_attrs[schema.PRIOR]
    (source,) = prior["sources"]
    assert source["kind"] == "model" and source["predicted"] > 0 and source["pruned_by_rules"] > 0
    assert "a100_sxm" in source["version"]
    waiting = handle.study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    arms = [t.user_attrs[schema.ARM] for t in waiting]
    assert arms[:2] == ["vllm-defaults", "trtllm-study-choice"] and arms[2] == schema.MODEL_PICK_ARM
    pick = waiting[2]
    assert pick.user_attrs[schema.PREDICTION] == max(p["value"] for p in prior["predictions"])
    seeded = [t for t in waiting[3:] if t.user_attrs.get(schema.PREDICTED_BY)]
    assert len(seeded) == 3
    # no seed is a config a rule prunes (TensorRT-LLM + FP8 or AWQ on SM80)
    assert not any(t.params.get("engine") == "trtllm" and t.params.get("quantization") != "none"
                   for t in waiting)
    assert isinstance(handle.study.sampler, PriorSampler)
    assert isinstance(load("prior", default_url("prior")).study.sampler, PriorSampler)


def test_no_prior_leaves_the_spaces_prior_out_of_the_study(studies):
    """`tune start --no-prior`: the control of a head-to-head, with no predictions whatever the
    host has installed (the H200's has no model package, a CPU host may)."""
    from pathlib import Path

    from tuner.errors import InputError
    from tuner.record.storage import study_names
    space = _a100_space(prior={"gpu": "a100-sxm-80gb", "candidates": 30, "seeds": 3})
    handle = create(space, "control", default_url("control"), use_prior=False)
    assert schema.PRIOR not in handle.study.user_attrs
    assert handle.study.user_attrs[schema.SPACE]["prior"] is None
    waiting = handle.study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    assert [t.user_attrs[schema.ARM] for t in waiting] == ["vllm-defaults", "trtllm-study-choice"]
    assert not isinstance(load("control", default_url("control")).study.sampler, PriorSampler)
    with pytest.raises(InputError, match="--no-prior and --prior-file contradict each other"):
        create(space, "both", default_url("both"), use_prior=False, prior_file=Path("prior.json"))
    assert "both" not in study_names(default_url("both"))


def test_an_unknown_estimator_fails_before_the_study_exists(studies):
    from tuner.errors import InputError
    from tuner.record.storage import study_names
    with pytest.raises(InputError, match="unknown estimator 'oracle'"):
        create(_a100_space(prior={"estimator": "oracle"}), "bad", default_url("bad"))
    assert "bad" not in study_names(default_url("bad"))


def test_a_warm_start_queues_the_earlier_best_configs_and_records_what_differs(studies):
    old = optuna.create_study(study_name="old", storage=open_storage(default_url("old"), create=True),
                              direction="maximize")
    old.set_user_attr(schema.FINGERPRINT, {"device": "sm90", "gpu": "NVIDIA H100 80GB HBM3"})
    dist = {"engine": CategoricalDistribution(["vllm", "sglang", "trtllm"]),
            "max_num_tokens": CategoricalDistribution([2048, 4096, 8192, 16384])}
    for i, (engine, mnt, value) in enumerate([("vllm", 2048, 100.0), ("sglang", 4096, 300.0),
                                              ("trtllm", 8192, 200.0), ("vllm", 16384, 50.0)]):
        old.add_trial(create_trial(params={"engine": engine, "max_num_tokens": mnt}, distributions=dist,
                                   value=value, user_attrs={schema.ARM: schema.SEARCH,
                                                            schema.ENGINE: engine},
                                   constraints={schema.ENGINE_START: 0.0}))
    handle = create(_a100_space(), "new", default_url("new"), warm_start=[("old", old)])
    waiting = handle.study.get_trials(states=(optuna.trial.TrialState.WAITING,))
    warm = [t for t in waiting if t.user_attrs.get(schema.WARM_START_OF)]
    assert [t.user_attrs[schema.WARM_START_OF] for t in warm] == ["old#1", "old#2", "old#0"]
    (source,) = handle.study.user_attrs[schema.PRIOR]["sources"]
    assert source["study"] == "old" and source["measured"] == 4 and "device" in source["differs"]
    assert isinstance(handle.study.sampler, PriorSampler)
