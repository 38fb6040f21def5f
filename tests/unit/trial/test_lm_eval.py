"""The lm-eval wiring's input errors: caught before any engine starts. The runs against a real
server are in tests/engine/test_quality_vllm.py."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tests.helpers import quality_space
from tuner.cli import app
from tuner.errors import InputError
from tuner.space import LmEval
from tuner.trial import lm_eval


def test_a_task_that_does_not_exist_stops_tune_start_before_any_launch(tmp_path, studies,
                                                                        lm_eval_bin):
    space = quality_space(tmp_path, {"lm_eval": {"tasks": ["no_such_task_xyz"],
                                                 "command": [str(lm_eval_bin)]}})
    result = CliRunner().invoke(app, ["start", "--space", str(space)], env={"COLUMNS": "200"})
    assert result.exit_code == 2, result.output
    assert "error: quality.lm_eval.tasks: Tasks not found: no_such_task_xyz" in result.output
    assert not studies.exists() or not list(studies.glob("*.db"))  # no study, nothing launched


def test_lm_eval_missing_or_a_missing_task_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match=r"'/nonexistent/lm-eval' not found; install "
                                         r"lm-evaluation-harness \(pip install 'tuner\[quality\]'\)"):
        lm_eval.check_tasks(LmEval(tasks=["t"], command=["/nonexistent/lm-eval"]))
    with pytest.raises(InputError, match="quality.lm_eval.include_path '/nonexistent/tasks' is not a folder"):
        lm_eval.check_tasks(LmEval(tasks=["t"], include_path="/nonexistent/tasks"))
