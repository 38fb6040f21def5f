"""The H200 spaces (vLLM 0.25.1 and SGLang 0.5.17 from installed folders, Qwen3-14B shape) and
the rule that a knob several engines search has one distribution."""

from __future__ import annotations

import pytest
import yaml

from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tests.helpers import SPACES, fixture_space
from tuner.paths import SPACES_DIR
from tuner.space import load_space, space_from_dict


@pytest.mark.parametrize("name", ["h200-vllm", "h200-sglang", "h200-engines"])
def test_h200_spaces_run_engines_from_their_folders(name: str) -> None:
    space = load_space(fixture_space(name))
    assert space.workload.dataset == "sharegpt" and space.workload.request_rate == float("inf")
    assert {b.engine for b in space.baselines} == set(space.engines)   # each engine's defaults
    for engine, choice in space.engines.items():
        assert choice.install and choice.install.endswith(("vllm-0.25.1", "sglang-0.5.17"))
        assert {"quantization", "kv_cache_dtype", "max_num_seqs", "max_num_tokens", "chunked_prefill",
                "gpu_memory_utilization"} <= set(choice.params)
        assert choice.params["quantization"].choices == ["none", "fp8"]
        plan = build_plan(load_engine(engine), choice, space.model, {"quantization": "fp8"}, port=8000)
        assert "--quantization" in plan.argv and "--load-format" in plan.argv
        assert plan.env["HF_HUB_OFFLINE"] == "1" and plan.env["PYTHONPATH"].endswith(choice.install.rsplit("/", 1)[1])


def test_a_knob_two_engines_search_must_offer_the_same_choices() -> None:
    data = yaml.safe_load((SPACES / "h200-engines.yaml").read_text())
    data["engines"]["sglang"]["params"]["max_num_tokens"]["choices"] = [2048, 4096, 8192, 16384]
    with pytest.raises(ValueError, match="sglang.max_num_tokens choices .* differ from vllm.max_num_tokens"):
        space_from_dict(data)
    data = yaml.safe_load((SPACES / "h200-engines.yaml").read_text())
    data["engines"]["sglang"]["params"]["max_num_seqs"] = {"type": "int", "low": 64, "high": 1024}
    with pytest.raises(ValueError, match="is an int knob but vllm.max_num_seqs is a choice knob"):
        space_from_dict(data)


def test_every_bundled_space_loads() -> None:
    for path in sorted(SPACES_DIR.glob("*.yaml")):
        try:
            load_space(path.stem)
        except InputError as exc:
            pytest.fail(f"{path.name}: {exc}")


def test_a_small_discrete_space_is_asked_about_every_config_and_a_large_one_about_n_draws() -> None:
    from tuner.space.suggest import candidate_configs

    grid = load_space(fixture_space("h200-vllm-grid"))
    configs = candidate_configs(grid, "vllm", 16)
    assert len({tuple(sorted(p.items())) for p, _ in configs}) == 16   # random draws gave 6
    pinned = candidate_configs(grid, "vllm", 16, fixed={"kv_cache_dtype": "auto"})
    assert len(pinned) == 8 and {k["kv_cache_dtype"] for _, k in pinned} == {"auto"}
    assert len(candidate_configs(grid, "vllm", 15)) == 15               # more configs than asked
    wide = load_space(fixture_space("h200-vllm"))                                      # a float knob: no grid
    assert len(candidate_configs(wide, "vllm", 16)) == 16
