"""The head-to-head harness (benchmarks/vs_vllm_sweep.py) drives the real `vllm bench sweep serve`
and reads what it wrote, so the comparison with vLLM's own tuner cannot silently rot.

A 2-config grid, one run each: one config vLLM serves, one it refuses. About 2 minutes on 2 cores
(one launch, one refusal, and the sweep's own start-up; the first run also installs vLLM's bench
extra into the cache).
"""

from __future__ import annotations

import pytest

from benchmarks import vs_vllm_sweep as vs
from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.space import Space

pytestmark = pytest.mark.engine

SERVED = {"max_num_seqs": 8, "max_num_batched_tokens": 2048, "enable_chunked_prefill": True,
          "max_model_len": 2048}
REFUSED = {"max_num_seqs": 8, "max_num_batched_tokens": 512, "enable_chunked_prefill": False,
           "max_model_len": 2048}


def test_harness_drives_the_real_sweep_and_reads_its_results(tmp_path, vllm_bin, tiny_model_path):
    assert vs.refused_by_vllm(REFUSED) and not vs.refused_by_vllm(SERVED)
    wl = vs.workload(num_prompts=16, input_len=128, output_len=16)
    sweep = vs.run_sweep([SERVED, REFUSED], wl, tmp_path, name="tiny", num_runs=1,
                         continue_on_error=True)
    assert sweep["exit_code"] == 0, sweep["log_tail"]
    assert sweep["summary_csv"]  # the bench extra (pandas) is on the sweep's path

    (result,) = sweep["results"]
    assert result["config"] == SERVED
    assert result["completed"] == [16] and len(result["values"]) == 1 and result["values"][0] > 0
    (refused,) = sweep["refused"]
    assert refused["config"] == REFUSED and "crashed" in refused["error"]
    assert sweep["recommendation"] == SERVED
    assert sweep["recommended_value"] == result["mean"]
    assert sweep["timeline"] == [[result["done_at_s"], result["mean"]]]

    # Launches and engine-seconds come from the sweep's own markers: one served life, one refused.
    assert sweep["launches"] == 2
    assert [life["refused"] for life in sweep["server_lives"]] == [False, True]
    assert all(life["seconds"] > 0 for life in sweep["server_lives"])
    assert 0 < sweep["engine_s"] < sweep["wall_s"]

    # The judge launches exactly what the sweep launched, and tune's space is the same candidate:
    # the same argv, flag for flag, from all three.
    port = sweep["port"]
    for config, command in zip([SERVED, REFUSED], sweep["server_commands"]):
        assert command == vs.serve_argv(port, config)
        space = Space.model_validate(vs.space_doc({k: [v] for k, v in config.items()}, wl,
                                                  "same", 1, 0))
        knobs = {vs.KNOB[k]: v for k, v in config.items()}
        plan = build_plan(load_engine("vllm"), space.engines["vllm"], space.model, knobs, port=port)
        assert sorted(plan.argv) == sorted(command)
