"""Hypothesis fuzzing of the workload readers (custom JSONL, Mooncake JSONL, BurstGPT CSV): any file
content either reads or fails with BenchInputError naming the file; nothing else escapes."""

import json
import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tuner.bench.datasets import check_file
from tuner.errors import BenchInputError

GOOD = {
    "custom": '{"prompt": "hello there"}\n{"text_input": "hi", "output_length": 4}\n'
              '{"input_length": 12}\n',
    "mooncake": '{"timestamp": 0, "input_length": 600, "output_length": 8, "hash_ids": [0, 1]}\n'
                '{"timestamp": 27, "input_length": 300, "output_length": 3, "hash_ids": [0]}\n',
    "burstgpt": "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                "5,ChatGPT,472,18,490,Conversation log\n6.1,GPT-4,80,0,80,API log\n",
}
FILES = {"custom": ("custom", "w.jsonl"), "mooncake": ("trace", "w.jsonl"),
         "burstgpt": ("trace", "w.csv")}
KEYS = ["prompt", "text_input", "input_length", "output_length", "output_tokens", "timestamp",
        "hash_ids", "bogus"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**20), st.floats(allow_nan=True),
                    st.text(string.printable, max_size=12))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.sampled_from(KEYS), inner,
                                                                       max_size=4)), max_leaves=10)
kinds = st.sampled_from(sorted(GOOD))
slow = settings(max_examples=120, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


def check(tmp_path, kind: str, content: str | bytes) -> None:
    dataset, name = FILES[kind]
    path = tmp_path / name
    path.write_bytes(content.encode("utf-8", "surrogatepass") if isinstance(content, str)
                     else content)
    try:
        check_file(dataset, path)
    except BenchInputError as exc:
        assert str(path) in str(exc)


@slow
@given(kinds, st.text(max_size=300))
def test_arbitrary_text(tmp_path, kind, text):
    check(tmp_path, kind, text)


@slow
@given(kinds, st.binary(max_size=300))
def test_arbitrary_bytes(tmp_path, kind, data):
    check(tmp_path, kind, data)


@slow
@given(kinds, st.binary(min_size=1, max_size=40), st.integers(0, 400))
def test_a_valid_file_with_bytes_spliced_in(tmp_path, kind, data, at):
    raw = GOOD[kind].encode()
    at = min(at, len(raw))
    check(tmp_path, kind, raw[:at] + data + raw[at:])


@slow
@given(st.sampled_from(["custom", "mooncake"]), st.integers(0, 1), st.sampled_from(KEYS), values)
def test_a_valid_line_with_one_field_replaced(tmp_path, kind, line, key, value):
    rows = [json.loads(x) for x in GOOD[kind].splitlines()]
    rows[line][key] = value
    check(tmp_path, kind, "".join(json.dumps(r) + "\n" for r in rows))


@slow
@given(st.integers(1, 2), st.integers(0, 5), st.text(string.printable, max_size=10))
def test_a_burstgpt_cell_replaced(tmp_path, line, column, text):
    lines = GOOD["burstgpt"].splitlines()
    cells = lines[line].split(",")
    cells[column] = text
    lines[line] = ",".join(cells)
    check(tmp_path, "burstgpt", "\n".join(lines) + "\n")
