"""`tuner.deploy` on a real finished study (vLLM CPU): the rendered command, run as printed, serves
the model on the port and host it names; the Kubernetes manifests of the same trial validate."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time

import httpx
import pytest
import yaml

from tuner import deploy
from tuner.record import results
from tuner.runtime.procgroup import free_port, kill_group
from tuner.study import load

pytestmark = pytest.mark.engine


def _wait_healthy(url: str, proc: subprocess.Popen, log, timeout_s: float = 300) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise AssertionError(f"the deployed command exited {proc.returncode}:\n"
                                 + log.read_text(errors="replace")[-3000:])
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError("the deployed command never became healthy:\n"
                         + log.read_text(errors="replace")[-3000:])


def test_the_printed_command_serves_and_the_manifests_validate(real_study, tmp_path):
    import kubernetes_validate

    studies, name, _ = real_study
    handle = load(name, f"sqlite:///{studies / (name + '.db')}")
    trial = results.best_config(handle.study).first
    recorded = trial.user_attrs["command"]
    port = free_port()
    d = deploy.deployment_from_trial(trial, handle.space, port=port, host="127.0.0.1")
    line = deploy.render_command(d).splitlines()[-1]
    tokens = shlex.split(line)
    env = {}
    while re.match(r"^[A-Za-z_]\w*=", tokens[0]):
        key, value = tokens.pop(0).split("=", 1)
        env[key] = value
    trial_port = re.search(r"--port (\d+)", recorded).group(1)
    assert f"--port {trial_port}" not in line and f"--port {port}" in line
    log = tmp_path / "deployed.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(tokens, env={**os.environ, **env}, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    try:
        _wait_healthy(f"http://127.0.0.1:{port}{d.health_path}", proc, log)
        models = httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=5).json()
        assert [m["id"] for m in models["data"]] == ["tiny-qwen3"]
    finally:
        kill_group(proc.pid, 10, leader=proc)
    d = deploy.deployment_from_trial(trial, handle.space, image="vllm/vllm-openai:v0.11.0")
    for doc in yaml.safe_load_all(deploy.render_kubernetes(d)):
        kubernetes_validate.validate(doc, "1.31.0", strict=True)
    service = yaml.safe_load(deploy.render_compose(d))["services"][d.name]
    assert service["command"][service["command"].index("--port") + 1] == "8000"
