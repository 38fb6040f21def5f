"""Bad input: one clear message naming the input, exit code 2, nothing half-written."""

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from tuner.cli.app import app
from tuner.paths import SPACES_DIR

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, list(args), catch_exceptions=False)


def test_unknown_space_lists_available(studies):
    r = invoke("start", "--space", "no-such-space")
    assert r.exit_code == 2
    assert "unknown space 'no-such-space'; available:" in r.output and "cpu-smoke" in r.output
    assert not studies.exists()


def test_invalid_yaml_names_file_line_and_key(tmp_path, studies):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\nmodel: {path: /m}\nengines:\n  vllm:\n    params:\n"
                   "      max_num_seqs: {type: int, low: 8, high: 2}\n")
    r = invoke("start", "--space", str(bad))
    assert r.exit_code == 2
    assert f"{bad}:6: engines.vllm.params.max_num_seqs" in r.output
    assert "low (8.0) is greater than high (2.0)" in r.output
    assert not studies.exists()


def test_missing_engine_command_is_named_and_no_study_is_created(tmp_path, studies, tiny_model_path):
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["engines"]["vllm"]["command"] = ["/nonexistent/venv/bin/vllm", "serve"]
    space = tmp_path / "s.yaml"
    space.write_text(yaml.safe_dump(data))
    r = invoke("start", "--space", str(space))
    assert r.exit_code == 2
    assert "engine command '/nonexistent/venv/bin/vllm' does not exist" in r.output
    assert not list(studies.glob("*")) if studies.exists() else True


def test_unknown_study_and_bad_storage(studies):
    r = invoke("status", "nope")
    assert r.exit_code == 2 and "no study named 'nope'" in r.output
    assert not (studies / "nope.db").exists()
    r = invoke("best", "x", "--storage", "not a url")
    assert r.exit_code == 2 and "--storage 'not a url' is not a database URL" in r.output


def test_bad_cli_value_is_rejected_by_the_parser():
    r = invoke("start", "--space", "cpu-smoke", "--n-trials", "0")
    assert r.exit_code == 2 and "--n-trials" in r.output


@pytest.mark.parametrize("command", ["start", "plan"])
@pytest.mark.parametrize("content", [b"\xff\xfename: x\n" + "model: m\n".encode("utf-16-le"),
                                     random.Random(15).randbytes(512), b"name: caf\xe9\n"],
                         ids=["utf-16-bom", "random-bytes", "latin-1"])
def test_a_space_file_with_bad_bytes_is_named_without_a_traceback(tmp_path, studies, command,
                                                                 content):
    """Run as a user runs it (a real process): exit 2, the file named, no traceback, no study."""
    space = tmp_path / "space.yaml"
    space.write_bytes(content)
    r = subprocess.run([sys.executable, "-m", "tuner", command, "--space", str(space)],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path,
                       env={**os.environ, "COLUMNS": "300"})
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"error: space file {space}: not UTF-8 text" in r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert not studies.exists() and not (tmp_path / "studies").exists()

def test_fp8_variant_without_torchao_says_what_to_install_before_writing_anything(tmp_path):
    import importlib.util

    import pytest
    if importlib.util.find_spec("torchao") is not None:
        pytest.skip("torchao is installed here: the variant would be written")
    r = invoke("model", "tiny", str(tmp_path / "m"), "--fp8-variant", str(tmp_path / "m-fp8"))
    assert r.exit_code == 2
    assert "error: --fp8-variant: an FP8 variant needs" in r.output and "pip install torchao" in r.output
    assert not (tmp_path / "m").exists()


def _space_file(tmp_path, edit) -> str:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    edit(data)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("command", ["start", "plan"])
def test_an_slo_on_a_metric_no_trial_records_is_refused_before_any_launch(tmp_path, studies, vllm_bin,
                                                                         tiny_model_path, command):
    """A misspelt SLO would otherwise fail every trial after its launch (three, then the study stops)."""
    space = _space_file(tmp_path, lambda d: d["objective"].update(slos={"p99_ttftt_ms": 100}))
    r = invoke(command, "--space", space)
    assert r.exit_code == 2
    assert "objective.slos.p99_ttftt_ms: 'p99_ttftt_ms' is not a metric a trial records; " \
           "did you mean 'p99_ttft_ms'?" in r.output
    assert not studies.exists()


def test_an_objective_metric_no_trial_records_is_refused(tmp_path, studies, vllm_bin, tiny_model_path):
    space = _space_file(tmp_path, lambda d: d["objective"].update(metric="total_token_throughputt"))
    r = invoke("start", "--space", space)
    assert r.exit_code == 2 and "objective.metric: 'total_token_throughputt'" in r.output
    assert not studies.exists()


def test_every_metric_a_trial_records_is_accepted():
    from tuner.trial.metric_names import recorded_metrics
    assert {"p99_ttft_ms", "mean_tpot_ms", "total_token_throughput", "failed_pct",
            "gpu_memory_peak_mib", "joules_per_output_token", "total_tokens_per_gpu_hour"} <= recorded_metrics()
    assert "request_goodput" not in recorded_metrics()  # trials set no goodput: always None


def test_a_negative_seed_is_refused_before_a_study_exists(tmp_path, studies):
    space = _space_file(tmp_path, lambda d: d.update(seed=-1))
    r = invoke("start", "--space", space)
    assert r.exit_code == 2 and "seed: Input should be greater than or equal to 0" in r.output
    assert not studies.exists()
    r = invoke("plan", "--space", "cpu-smoke", "--seed", "-5")
    assert r.exit_code == 2 and "--seed" in r.output


@pytest.mark.parametrize("storage", [[], ["--storage", "journal:///{tmp}/j.journal"]],
                         ids=["default", "journal"])
@pytest.mark.parametrize("name", ["../evil", "a/b", ".hidden"])
def test_a_study_name_that_is_not_one_file_name_is_refused(tmp_path, studies, name, storage):
    r = invoke("start", "--space", "cpu-smoke", "--study", name, *[s.format(tmp=tmp_path) for s in storage])
    assert r.exit_code == 2 and f"study name {name!r}: use letters, digits" in r.output
    assert not studies.exists() and not (tmp_path / "evil.db").exists()
    assert not (tmp_path / "j.journal").exists()


def test_a_storage_that_cannot_be_created_is_named(tmp_path, studies):
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    r = invoke("start", "--space", "cpu-smoke", "--storage", f"sqlite:///{blocker}/x.db")
    assert r.exit_code == 2
    assert f"--storage 'sqlite:///{blocker}/x.db': cannot create {blocker}/x.db" in r.output


@pytest.mark.parametrize("target, weights, words", [
    ("afile", "--no-weights", "{tmp}/afile is a file, not a folder"),
    ("full", "--no-weights", "{tmp}/full is a folder that is not empty"),
    ("afile/m", "--no-weights", "{tmp}/afile/m: {tmp}/afile is a file, not a folder"),
    ("/proc/m", "--no-weights", "/proc/m: cannot create a folder in /proc"),
    ("/proc/m", "--weights", "/proc/m: cannot create a folder in /proc"),
])
def test_model_tiny_names_a_folder_it_cannot_write_and_leaves_nothing(tmp_path, target, weights,
                                                                       words):
    (tmp_path / "afile").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep").write_text("x")
    before = sorted(tmp_path.rglob("*"))
    r = invoke("model", "tiny", str(tmp_path / target), weights)
    assert r.exit_code == 2, r.output
    assert "error: " + words.format(tmp=tmp_path) in r.output
    assert sorted(tmp_path.rglob("*")) == before and not Path("/proc/m.partial").exists()


def test_model_tiny_refuses_an_unknown_device(tmp_path):
    r = invoke("model", "tiny", str(tmp_path / "m"), "--device", "nosuch")
    assert r.exit_code == 2
    assert "error: --device 'nosuch' is not a device; use cpu, cuda or cuda:N" in r.output
    assert list(tmp_path.iterdir()) == []


def test_a_build_that_fails_midway_leaves_no_partial_folder(tmp_path, monkeypatch):
    from tuner import tiny_model
    from tuner.errors import InputError

    def disk_full(out_dir):
        (out_dir / "tokenizer.json").write_text("{")
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(tiny_model, "train_tokenizer", disk_full)
    with pytest.raises(InputError, match="m: cannot write the model there .*No space left"):
        tiny_model.build(tmp_path / "m")
    assert list(tmp_path.iterdir()) == []
