"""Hypothesis fuzzing of the space loader: any file content either loads or fails with InputError
naming the file; nothing else escapes."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.errors import InputError
from tuner.space import load_space

GOOD = """name: fuzz
model: {path: /models/m}
engines:
  vllm:
    params:
      max_num_seqs: {type: int, low: 2, high: 64, log: true, default: 32}
      chunked_prefill: {type: bool}
workload: {num_prompts: 10}
"""

scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**6), st.floats(allow_nan=True),
                    st.text(string.printable, max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(string.ascii_letters + "_", max_size=10),
                                                 inner, max_size=4)), max_leaves=12)
keys = st.sampled_from(["name", "model", "engines", "workload", "objective", "budget",
                        "baselines", "sampler", "fidelity", "seed", "workloads", "bogus"])


def check(tmp_path, text: str) -> None:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    try:
        load_space(str(path))
    except InputError as exc:
        assert str(path) in str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_arbitrary_text(tmp_path, text):
    check(tmp_path, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys, values)
def test_a_valid_space_with_one_key_replaced(tmp_path, key, value):
    import yaml
    data = yaml.safe_load(GOOD)
    data[key] = value
    check(tmp_path, yaml.safe_dump(data))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["type", "low", "high", "step", "log", "choices", "when", "default"]),
       values)
def test_a_param_field_replaced(tmp_path, field, value):
    import yaml
    data = yaml.safe_load(GOOD)
    data["engines"]["vllm"]["params"]["max_num_seqs"][field] = value
    check(tmp_path, yaml.safe_dump(data))
