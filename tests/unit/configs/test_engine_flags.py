"""Every command line our engine YAMLs can generate is accepted by the engine's own parser.

vLLM and transformers serve are parsed by their real parsers (the CPU venvs, in a subprocess).
SGLang and TensorRT-LLM do not install without CUDA: their flag sets and config keys were extracted
from their source at a pinned version into tests/data/engine_flags/ (see each file's "source").
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from tests.helpers import DATA
from tuner.configs.translate import build_plan
from tuner.engines.spec import EngineSpec, Knob, load_engine
from tuner.space import EngineChoice, Model

FLAGS = DATA / "engine_flags"
MODEL = Model(path="/models/m", served_name="m")
PLACEHOLDER = {"int": 1024, "float": 0.5, "str": "x"}


def knob_values(knob: Knob) -> list:
    if knob.type == "bool":
        return [True, False]
    if knob.values is not None:
        return list(knob.values)
    return [PLACEHOLDER[knob.type]]


def configs(spec: EngineSpec) -> list[dict]:
    """One config per (knob, value), plus every knob at once (both ways round for booleans)."""
    singles = [{name: v} for name, k in spec.knobs.items() if not k.checkpoint_only
               for v in knob_values(k)]
    everything = [{name: knob_values(k)[i % len(knob_values(k))] for name, k in spec.knobs.items()
                   if not k.checkpoint_only} for i in (0, 1)]
    return singles + everything


def plans(engine: str):
    spec = load_engine(engine)
    return [(knobs, build_plan(spec, EngineChoice(), MODEL, knobs, port=8000))
            for knobs in configs(spec)]


def dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def expected_dests(spec: EngineSpec, knobs: dict) -> dict:
    """What the parser should have stored for a single-knob config."""
    (name, value), = knobs.items()
    knob = spec.knobs[name]
    if knob.flag:
        engine_value = knob.values[str(value)] if knob.values is not None else value
        return {dest(knob.flag): engine_value}
    flags = (knob.when_true if value else knob.when_false) or []
    if len(flags) != 1:
        return {}
    name = flags[0].lstrip("-")
    return {dest(name.removeprefix("no-")): not name.startswith("no-")}  # --no-x stores x=False


def run_parser(python: Path, script: str, argvs: list[list[str]]) -> list[dict]:
    proc = subprocess.run([str(python), "-c", script], input=json.dumps(argvs), text=True,
                          capture_output=True, timeout=600)
    marker = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    assert marker, proc.stdout[-2000:] + proc.stderr[-4000:]
    return json.loads(marker[-1][len("RESULT "):])


# ---- vLLM: the real parser -----------------------------------------------------------------------

VLLM_SCRIPT = r"""
import contextlib, io, json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
cmd = ServeSubcommand()
parser = FlexibleArgumentParser(prog="vllm")
cmd.subparser_init(parser.add_subparsers(required=False, dest="subparser"))
out = []
for argv in json.load(sys.stdin):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            ns = parser.parse_args(argv)
            cmd.validate(ns)
        out.append({"ok": True, "ns": {k: v for k, v in vars(ns).items()
                                        if isinstance(v, (str, int, float, bool, type(None)))}})
    except SystemExit:
        out.append({"ok": False, "error": err.getvalue()[-800:]})
    except Exception as exc:
        out.append({"ok": False, "error": repr(exc)})
print("RESULT " + json.dumps(out))
"""


def test_vllm_argv_is_accepted_by_vllms_parser(vllm_bin):
    spec = load_engine("vllm")
    cases = plans("vllm")
    argvs = [p.argv[1:] for _, p in cases] + [["serve", "/m", "--kv-cache-dtype", "fp9"]]
    results = run_parser(vllm_bin.parent / "python", VLLM_SCRIPT, argvs)
    assert not results[-1]["ok"] and "invalid choice" in results[-1]["error"]  # the harness can fail
    for (knobs, plan), res in zip(cases, results):
        assert res["ok"], f"{plan.command_line()}\n{res['error']}"
        ns = res["ns"]
        assert ns["model_tag"] == "/models/m" and ns["port"] == 8000
        if len(knobs) == 1:
            for key, value in expected_dests(spec, knobs).items():
                assert ns[key] == value, (knobs, key, ns[key])


# ---- transformers serve: the real parser (click, through typer) ----------------------------------

TRANSFORMERS_SCRIPT = r"""
import json, sys
import click
from transformers.cli.transformers import app
out = []
for argv in json.load(sys.stdin):
    try:
        ctx = app.make_context("transformers", list(argv))
        name, sub, rest = app.resolve_command(ctx, ctx.protected_args + ctx.args)
        sctx = sub.make_context(name, rest, parent=ctx)
        out.append({"ok": True, "ns": {k: v for k, v in sctx.params.items()
                                        if isinstance(v, (str, int, float, bool, type(None)))}})
    except click.ClickException as exc:
        out.append({"ok": False, "error": exc.format_message()})
print("RESULT " + json.dumps(out))
"""


def test_transformers_argv_is_accepted_by_its_parser(transformers_bin):
    spec = load_engine("transformers")
    cases = plans("transformers")
    argvs = [p.argv[1:] for _, p in cases] + [["serve", "/m", "--cb-num-blocks", "many"]]
    results = run_parser(transformers_bin.parent / "python", TRANSFORMERS_SCRIPT, argvs)
    assert not results[-1]["ok"] and "many" in results[-1]["error"]
    for (knobs, plan), res in zip(cases, results):
        assert res["ok"], f"{plan.command_line()}\n{res['error']}"
        ns = res["ns"]
        assert ns["force_model"] == "/models/m" and ns["port"] == 8000 and ns["host"] == "127.0.0.1"
        if len(knobs) == 1:
            for key, value in expected_dests(spec, knobs).items():
                assert ns[key] == value, (knobs, key, ns[key])


# ---- SGLang and TensorRT-LLM: pinned flag sets from their source ---------------------------------

def pinned(name: str) -> dict:
    data = json.loads((FLAGS / name).read_text())
    assert data["source"] and data["version"]
    return data


def check_flags(argv: list[str], flags: set[str], boolean: set[str], choices: dict) -> None:
    """Walk an argv the way argparse/click would: every option known, values where they belong."""
    i = 0
    while i < len(argv):
        flag = argv[i]
        assert flag.startswith("--"), f"stray value {flag!r} in {argv}"
        assert flag in flags, f"{flag} is not an option of this engine version"
        if flag in boolean:
            i += 1
            continue
        assert i + 1 < len(argv), f"{flag} needs a value"
        value = argv[i + 1]
        if flag in choices:
            assert value in choices[flag], f"{flag} {value}: not one of {choices[flag]}"
        i += 2


def test_sglang_argv_uses_only_flags_of_the_pinned_version():
    data = pinned("sglang-0.5.5.post1.json")
    flags, boolean, choices = set(data["flags"]), set(data["boolean_flags"]), data["choices"]
    assert not {"--chunked-prefill-size", "--mem-fraction-static"} & set(data["multi_value_flags"])
    for knobs, plan in plans("sglang"):
        assert plan.argv[:3] == ["python3", "-m", "sglang.launch_server"]
        check_flags(plan.argv[3:], flags, boolean, choices)
        assert plan.config_file is None


def test_sglang_kv_cache_fp8_is_spelled_fp8_e4m3():
    data = pinned("sglang-0.5.5.post1.json")
    assert "fp8" not in data["choices"]["--kv-cache-dtype"]
    plan = build_plan(load_engine("sglang"), EngineChoice(), MODEL, {"kv_cache_dtype": "fp8"}, port=1)
    assert plan.argv[-2:] == ["--kv-cache-dtype", "fp8_e4m3"]


def _yaml_paths(tree: dict, prefix: str = "") -> list[tuple[str, str]]:
    """(parent, key) pairs of a generated config, for nested keys one level down."""
    out = []
    for key, value in tree.items():
        out.append((prefix, key))
        if isinstance(value, dict):
            out += _yaml_paths(value, key)
    return out


def test_trtllm_argv_and_yaml_use_only_options_of_the_pinned_source():
    data = pinned("trtllm-00209af1.json")
    flags, boolean = set(data["cli_flags"]), set(data["boolean_flags"])
    yaml_keys = data["yaml_keys"]
    for knobs, plan in plans("trtllm"):
        assert plan.argv[:2] == ["trtllm-serve", "serve"] and plan.argv[2] == "/models/m"
        check_flags(plan.argv[3:], flags, boolean, {})
        if plan.config_file is None:
            continue
        tree = yaml.safe_load(plan.config_file)
        for parent, key in _yaml_paths(tree):
            assert key in yaml_keys[parent], f"{parent}.{key} is not a field (extra=forbid fails)"
        # A YAML top-level key replaces what the CLI set for it: a knob is on one side only.
        set_by_cli = {data["cli_sets_llm_args"][a] for a in plan.argv if a in data["cli_sets_llm_args"]}
        assert not set_by_cli & set(tree), (knobs, set_by_cli & set(tree))


def test_trtllm_memory_fraction_and_kv_dtype_share_one_kv_cache_config_block():
    """The YAML kv_cache_config block replaces the one --free_gpu_memory_fraction would build."""
    plan = build_plan(load_engine("trtllm"), EngineChoice(), MODEL,
                      {"gpu_memory_utilization": 0.8, "kv_cache_dtype": "fp8", "cuda_graphs": True,
                       "chunked_prefill": False}, port=1)
    assert "--free_gpu_memory_fraction" not in plan.argv
    assert yaml.safe_load(plan.config_file) == {
        "kv_cache_config": {"free_gpu_memory_fraction": 0.8, "dtype": "fp8"},
        "cuda_graph_config": {}, "enable_chunked_prefill": False}
    eager = build_plan(load_engine("trtllm"), EngineChoice(), MODEL, {"cuda_graphs": False}, port=1)
    assert yaml.safe_load(eager.config_file) == {"cuda_graph_config": None}
