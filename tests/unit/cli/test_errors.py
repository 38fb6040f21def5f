"""Bad input: one clear message naming the input, exit code 2, nothing half-written."""

import os
import random
import subprocess
import sys

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
