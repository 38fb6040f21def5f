"""The engine YAML files: complete, consistent with each other, and documented in docs/engines.md."""

import importlib.util
import re
from glob import glob

import pytest

from tests.helpers import REPO
from tuner.engines.spec import EngineSpec, Knob, available_engines, load_engine
from tuner.space import available_spaces, load_space

ENGINES = ["sglang", "transformers", "trtllm", "vllm"]
# The data files that carry engine knowledge and its sources (comments included).
DATA_YAML = sorted([*(REPO / "engines").rglob("*.yaml"), *(REPO / "tuner").rglob("*.yaml"),
                    *(REPO / "search_spaces").glob("*.yaml")])
TOP_LEVEL = sorted(p.name for p in REPO.iterdir() if not p.name.startswith("."))
NAMED_FILE = re.compile(r"[\w./*-]+\.(?:md|txt|log)\b|(?<![\w./-])(?:%s)/[\w./*-]+"
                        % "|".join(map(re.escape, TOP_LEVEL)))


def outside_files(text: str) -> list[str]:
    """The files a text cites that the repository does not hold. A document, list or log named by
    file (``*.md``, ``*.txt``, ``*.log``) or a path under one of the repository's top-level folders
    must be a path of this repository (a glob matching at least one file); a path that climbs out
    (``../``) never is. URLs and an engine's own source paths (``vllm/config/model.py``) are not
    repository files and are not checked here."""
    text = re.sub(r"https?://\S+", " ", text)
    cited = (m.group(0).rstrip(".,;:)") for m in NAMED_FILE.finditer(text))
    return [path for path in cited if ".." in path.split("/") or not glob(str(REPO / path))]


def test_all_engines_load():
    assert available_engines() == ENGINES


@pytest.mark.parametrize("engine", ENGINES)
def test_every_knob_says_what_it_means_and_its_default(engine):
    for name, knob in load_engine(engine).knobs.items():
        assert knob.meaning and knob.default, f"{engine}.{name}"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_rule_and_failure_has_a_source(engine):
    spec = load_engine(engine)
    assert spec.rules, engine
    for rule in spec.rules:
        assert rule.source and rule.reason and rule.id.startswith(engine), rule.id
    for sig in spec.failures:
        assert sig.source, sig.patterns


@pytest.mark.parametrize("path", DATA_YAML, ids=lambda p: str(p.relative_to(REPO)))
def test_engine_data_cites_only_public_sources_and_repository_files(path):
    """A source is an engine's repository at a version, an upstream URL, or this repository's own
    evidence (a test, a log under tests/data/logs, a findings page): never a file kept elsewhere."""
    assert outside_files(path.read_text()) == [], path


@pytest.mark.parametrize("text, outside", [
    ('source: "notes-kept-elsewhere.md 1.1 constraint 2"', ["notes-kept-elsewhere.md"]),
    ("runs (elsewhere/reference/gpu-notes.md); FP8", ["elsewhere/reference/gpu-notes.md"]),
    ("the 43 wheels and wheels-list.txt", ["wheels-list.txt"]),
    ("see ../notes/facts.md", ["../notes/facts.md"]),
    ("in tests/data/logs/no-such-case.log", ["tests/data/logs/no-such-case.log"]),
    ("reproduced: tests/data/logs/vllm-0.32.0-cpu-invalid-config-max-num-seqs-0.log", []),
    ("docs/findings/h200-vllm-tuned.md, tests/data/logs/sglang-*", []),
    ("vllm-project/vllm v0.32.0 vllm/config/model.py; https://docs.vllm.ai/en/latest/x.md", []),
])
def test_outside_files_flags_what_the_repository_does_not_hold(text, outside):
    assert outside_files(text) == outside


def test_the_engine_spaces_load():
    for name in ("a100-throughput", "h100-throughput", "h200-throughput", "rtx4090-24gb",
                 "cpu-transformers", "cpu-smoke"):
        assert name in available_spaces()
        load_space(name)


def test_a100_space_is_the_motivating_study():
    s = load_space("a100-throughput")
    assert s.model.path == "Qwen/Qwen3-14B"
    assert s.model.variants == {"fp8": "Qwen/Qwen3-14B-FP8", "awq": "Qwen/Qwen3-14B-AWQ"}
    assert list(s.engines) == ["vllm", "sglang", "trtllm"]
    assert (s.workload.dataset, s.workload.num_prompts, s.workload.request_rate) == \
        ("sharegpt", 1000, float("inf"))
    assert s.workload.dataset_path.startswith("${TUNER_DATA}/")
    assert {b.name: (b.engine, b.params) for b in s.baselines} == {
        "vllm-defaults": ("vllm", {}),
        "trtllm-study-choice": ("trtllm", {"max_seq_len": 40960, "chunked_prefill": True})}


def test_transformers_request_omits_what_it_rejects():
    req = load_engine("transformers").request
    assert {"ignore_eos", "repetition_penalty"} <= set(req.omit_fields)
    assert req.model_name == "path"  # the server is pinned to the exact path it was started with
    assert load_engine("transformers").readiness.path == "/health"


@pytest.mark.parametrize("engine, line, version", [
    ("vllm", "INFO 11-30 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config:", "0.11.0"),
    ("trtllm", "[TensorRT-LLM] TensorRT-LLM version: 1.2.0rc1", "1.2.0rc1"),
    ("trtllm", "[TensorRT-LLM] TensorRT LLM version: 1.3.0", "1.3.0"),
    ("transformers", '  "transformers_version": "5.24.0",', "5.24.0"),
])
def test_version_patterns(engine, line, version):
    m = re.search(load_engine(engine).version_pattern, f"noise\n{line}\nmore")
    assert m and m.group(1) == version


def test_sglang_reports_its_version_over_http():
    assert load_engine("sglang").version_path == "/get_server_info"


def test_failure_dimensions_must_be_engine_device_or_a_knob():
    with pytest.raises(Exception, match="generalises_on names quant"):
        EngineSpec.model_validate({
            "name": "x", "display_name": "X", "command": ["x"], "knobs": {"quantization": {"flag": "-q"}},
            "failures": [{"class": "crashed", "patterns": ["boom"],
                          "generalises_on": ["engine", "quant"]}]})


def test_rule_ids_are_unique():
    rule = {"id": "x-a", "when": "knobs.a > 1", "reason": "r", "source": "s"}
    with pytest.raises(Exception, match="unique"):
        EngineSpec.model_validate({"name": "x", "display_name": "X", "command": ["x"],
                                   "rules": [rule, rule]})


def test_checkpoint_only_knob_has_no_flag_and_no_values():
    knob = Knob.model_validate({"checkpoint_only": True, "type": "str"})
    assert knob.prefer_checkpoint and knob.values == {}
    with pytest.raises(Exception, match="checkpoint_only"):
        Knob.model_validate({"checkpoint_only": True, "flag": "--quantization"})


def test_docs_table_matches_the_engine_yaml():
    found = importlib.util.spec_from_file_location("engines_table", REPO / "scripts" / "engines_table.py")
    engines_table = importlib.util.module_from_spec(found)
    found.loader.exec_module(engines_table)
    doc = (REPO / "docs" / "engines.md").read_text()
    assert engines_table.splice(doc) == doc, "docs/engines.md is stale: run scripts/engines_table.py"
    for trap in ("fp8_e4m3", "--no-enable-chunked-prefill", "replaces", "422", "free after the weights"):
        assert trap in doc


def test_gpus_a_launch_takes():
    vllm = load_engine("vllm")
    assert vllm.gpus({}) == 1 and vllm.gpus({"max_num_seqs": 64}) == 1
    assert vllm.gpus({"tensor_parallel": 2}) == vllm.gpus({"data_parallel": 2}) == 2
    assert vllm.gpus({"tensor_parallel": 2, "data_parallel": 2}) == 4
    assert load_engine("sglang").gpus({"tensor_parallel": 2}) == 2
    assert load_engine("transformers").gpus({}) == 1
    with pytest.raises(Exception, match="gpus_per_launch names tp"):
        EngineSpec.model_validate({"name": "x", "display_name": "X", "command": ["x"],
                                   "gpus_per_launch": ["tp"]})
