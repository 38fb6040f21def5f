"""One description of the benchmark settings (tuner.space.bench_settings): the space's workload, the
client's BenchConfig and `tune bench`'s options take each default from it, and each option keeps the
`vllm bench serve` flag recorded there."""

from __future__ import annotations

import dataclasses

import typer

from tuner.bench.config import BenchConfig
from tuner.cli import app
from tuner.space import Workload
from tuner.space.bench_settings import DEFAULTS, BenchSettings, flag, help_of

# `tune bench --help`'s flags: vllm bench serve's names, plus the client's own few.
BENCH_FLAGS = {
    "--model", "--base-url", "--host", "--port", "--endpoint", "--served-model-name", "--tokenizer",
    "--dataset-name", "--dataset-path", "--num-prompts", "--random-input-len", "--random-output-len",
    "--random-range-ratio", "--random-prefix-len", "--sharegpt-output-len", "--custom-output-len",
    "--skip-chat-template", "--disable-shuffle", "--prefix-repetition-prefix-len",
    "--prefix-repetition-suffix-len", "--prefix-repetition-num-prefixes",
    "--prefix-repetition-output-len", "--multi-turn-turns", "--multi-turn-input-len",
    "--multi-turn-output-len", "--time-scale", "--trace-block-size", "--request-rate",
    "--burstiness", "--max-concurrency", "--goodput", "--percentile-metrics", "--metric-percentiles",
    "--seed", "--num-warmups", "--ignore-eos", "--no-ignore-eos", "--temperature", "--omit-field",
    "--request-timeout", "--save-result", "--result-dir", "--result-filename", "--disable-tqdm",
}


def _bench_options() -> dict[str, object]:
    command = typer.main.get_command(app).commands["bench"]
    return {opt: param for param in command.params for opt in (*param.opts, *param.secondary_opts)}


def test_tune_bench_keeps_vllms_flag_names():
    assert set(_bench_options()) == BENCH_FLAGS


def test_each_shared_setting_has_one_default_and_one_help():
    options = _bench_options()
    config = {f.name: f.default for f in dataclasses.fields(BenchConfig)}
    workload = Workload()
    for name in BenchSettings.model_fields:
        option = options[flag(name)]
        assert option.default == getattr(DEFAULTS, name), name
        assert option.help == help_of(name), name
        assert config["dataset_name" if name == "dataset" else name] == getattr(DEFAULTS, name), name
        assert getattr(workload, name) == getattr(DEFAULTS, name), name


def test_a_workload_becomes_the_clients_config_field_by_field():
    workload = Workload(dataset="sharegpt", dataset_path="x.json", num_prompts=7, request_rate=2.5,
                        max_concurrency=3, seed=5, random_prefix_len=4)
    config = BenchConfig.from_settings(workload, base_url="http://s", model="m", tokenizer="t")
    assert config.dataset_name == "sharegpt" and config.dataset_path == "x.json"
    assert (config.num_prompts, config.request_rate, config.max_concurrency, config.seed,
            config.random_prefix_len) == (7, 2.5, 3, 5, 4)
