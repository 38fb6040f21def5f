"""Hypothesis fuzzing of the space loader: any file content, text or bytes, either loads or fails
with InputError naming the file; nothing else escapes (no UnicodeDecodeError, no RecursionError)."""

import string

import pytest
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


def check(tmp_path, content: str | bytes) -> None:
    path = tmp_path / "space.yaml"
    path.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    try:
        load_space(str(path))
    except InputError as exc:
        assert str(path) in str(exc)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.text(max_size=300))
def test_arbitrary_text(tmp_path, text):
    check(tmp_path, text)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=300))
def test_arbitrary_bytes(tmp_path, data):
    check(tmp_path, data)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(["latin-1", "utf-16", "utf-16-be", "utf-32", "cp1252"]),
       st.text(st.characters(max_codepoint=255), max_size=40), st.integers(0, len(GOOD)))
def test_a_valid_space_in_another_encoding(tmp_path, encoding, text, at):
    """A space saved by an editor in another encoding, with a few non-ASCII characters in it."""
    content = (GOOD[:at] + text + GOOD[at:]).encode(encoding, errors="replace")
    check(tmp_path, content)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(min_size=1, max_size=40), st.integers(0, len(GOOD)))
def test_a_valid_space_with_bytes_spliced_in(tmp_path, data, at):
    raw = GOOD.encode()
    check(tmp_path, raw[:at] + data + raw[at:])


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


@pytest.mark.parametrize("text", ["{{}}", "? [a, b]\n: 1\n", "{{a: 1}: 2}"])
def test_a_mapping_or_list_as_a_key_is_an_input_error(tmp_path, text):
    path = tmp_path / "space.yaml"
    path.write_text(text)
    with pytest.raises(InputError, match=f"{path}:1: invalid YAML: a key must be a name"):
        load_space(str(path))
