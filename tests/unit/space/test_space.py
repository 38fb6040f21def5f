"""Space files: valid ones load, bad ones fail with file, line and key."""

import textwrap

import optuna
import pytest
import yaml

from tuner.errors import InputError
from tuner.paths import SPACES_DIR
from tuner.space import available_spaces, baseline_params, load_space, suggest

GOOD = """\
name: mine
model: {path: /models/m}
engines:
  vllm:
    params:
      max_num_seqs: {type: int, low: 2, high: 64, log: true, default: 32}
      chunked_prefill: {type: bool, default: true}
      max_num_tokens: {type: int, low: 256, high: 4096, when: {chunked_prefill: false}, default: 2048}
baselines:
  - {name: defaults, engine: vllm}
"""


def write(tmp_path, text):
    p = tmp_path / "space.yaml"
    p.write_text(textwrap.dedent(text))
    return p


def test_shipped_spaces_load():
    assert "cpu-smoke" in available_spaces()
    for name in available_spaces():
        assert load_space(name).name


def test_user_file_loads_and_suggests_conditionally(tmp_path):
    space = load_space(str(write(tmp_path, GOOD)))
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=1))
    seen = set()
    for _ in range(20):
        trial = study.ask()
        engine, knobs = suggest(trial, space)
        assert engine == "vllm"
        assert ("max_num_tokens" in knobs) == (knobs["chunked_prefill"] is False)
        seen.add(knobs["chunked_prefill"])
        study.tell(trial, 1.0)
    assert seen == {True, False}


def test_defaults_baseline_enqueues_documented_defaults_and_omits_flags(tmp_path):
    space = load_space(str(write(tmp_path, GOOD)))
    params, omitted = baseline_params(space, space.baselines[0])
    assert params == {"max_num_seqs": 32, "chunked_prefill": True, "max_num_tokens": 2048}
    assert omitted == ["max_num_seqs", "chunked_prefill", "max_num_tokens"]


@pytest.mark.parametrize("bad, expected", [
    (GOOD.replace("log: true", "log: true, colour: red"),
     r"space.yaml:6: engines.vllm.params.max_num_seqs.colour: unknown key"),
    (GOOD.replace("low: 2, high: 64", "low: 64, high: 2"),
     r"space.yaml:6: engines.vllm.params.max_num_seqs: Value error, low \(64.0\) is greater than high \(2.0\)"),
    (GOOD.replace("low: 2,", "low: two,"),
     r"space.yaml:6: engines.vllm.params.max_num_seqs.low: Input should be a valid number"),
    (GOOD.replace("  vllm:\n", "  vllmm:\n"), r"unknown engine 'vllmm'; available: .*vllm"),
    (GOOD.replace("{type: bool, default: true}", "{type: categorical, choices: []}"),
     r"chunked_prefill: Value error, categorical param needs a non-empty choices list"),
    (GOOD.replace("max_num_seqs:", "max_seqs:"), r"engine 'vllm' has no knob 'max_seqs'"),
    (GOOD.replace("when: {chunked_prefill: false}", "when: {later: 1}"),
     r"condition on 'later', which is not an earlier param"),
    (GOOD.replace("engine: vllm}", "engine: sglang}"), r"baseline 'defaults' uses engine 'sglang'"),
    (GOOD + "budget: {n_trials: 0}\n", r"space.yaml:11: budget.n_trials: Input should be greater than 0"),
])
def test_schema_errors_name_file_line_and_key(tmp_path, bad, expected):
    with pytest.raises(InputError, match=expected):
        load_space(str(write(tmp_path, bad)))


def test_invalid_yaml_names_the_line(tmp_path):
    with pytest.raises(InputError, match=r"space.yaml:4: invalid YAML: .*\(while parsing a flow sequence at line 3\)"):
        load_space(str(write(tmp_path, "name: x\nmodel: {path: /m}\nengines: [unclosed\n")))


def test_duplicate_key_is_an_error(tmp_path):
    with pytest.raises(InputError, match=r"space.yaml:2: invalid YAML: duplicate key 'name'"):
        load_space(str(write(tmp_path, "name: x\nname: y\n")))


def test_unknown_space_lists_available_ones():
    with pytest.raises(InputError, match=r"unknown space 'nope'; available: .*cpu-smoke"):
        load_space("nope")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_space(str(tmp_path / "missing.yaml"))


def test_a_named_workload_set_expands_in_a_space(tmp_path):
    from tuner.space import load_space
    from tuner.space.workload_sets import seed_study
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["workloads"] = [{"set": "seed-study", "num_prompts": 3, "max_len": 4096}]
    data["evaluation_workloads"] = [{"set": "seed-study", "dataset_path": "/d/sg.json"}]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    space = load_space(str(path))
    assert [w.name for w in space.workloads] == ["short-128-4", "medium-2000-100",
                                                 "long-3896-200", "very-long-3996-100"]
    assert {w.num_prompts for w in space.workloads} == {3}
    assert [(w.name, w.num_prompts) for w in space.evaluation_workloads] == [
        (w["name"], w["num_prompts"]) for w in seed_study(None, "/d/sg.json")]
    assert [w.num_prompts for w in space.evaluation_workloads] == [1000, 1000, 500, 500, 100]
    data["workloads"] = [{"set": "no-such-set"}]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="unknown workload set 'no-such-set'; known: seed-study"):
        load_space(str(path))


@pytest.mark.parametrize("seed", [-1, 2**32])
def test_a_workload_seed_outside_numpy_range_is_refused_at_load(tmp_path, seed):
    """numpy seeds the samples with it: a space is refused when loaded, not at its first trial."""
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["workload"]["seed"] = seed
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match=r"seed: Input should be (greater|less) than or equal to"):
        load_space(str(path))
