"""Engines in containers: the `docker run` line (no daemon needed), then real studies with vLLM in
containers on a real Docker daemon: containers are removed after each trial, `tune resume` removes
one a SIGKILLed tuner left, and a missing image fails before any launch.

The image is an empty one with the host's filesystem bind-mounted read-only, so the real vLLM CPU
venv runs inside without a registry.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
import pytest
import yaml

from tests.helpers import load, no_docker, run_tune, wait_for
from tuner.configs.container import unique_name
from tuner.configs.translate import build_plan
from tuner.engines.failures import NOT_THE_CONFIG, classify_exit
from tuner.engines.runtimes import runtime_failures, with_runtime_failures
from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tuner.paths import SPACES_DIR, cache_dir
from tuner.record.schema import launched
from tuner.redact import MASK, redact_argv, redact_space
from tuner.runtime import orphans
from tuner.runtime.container import inspect_image
from tuner.space import Container, EngineChoice, Model, load_space

TUNE = Path(sys.executable).parent / "tune"
IMAGE = "tuner/hostfs:test"


def _container(**kw) -> Container:
    return Container(image=IMAGE, **kw)


def _plan(tmp_path: Path, container: Container, env: dict | None = None, engine: str = "vllm",
          knobs: dict | None = None, **kw):
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    choice = EngineChoice(command=["/venv/bin/vllm", "serve"], env=env or {}, container=container)
    return build_plan(load_engine(engine), choice, Model(path=str(model)), knobs or {}, port=8123,
                      container_name="tuner-s-trial-0001-abc123",
                      cidfile=str(tmp_path / "container.id"), **kw)


# ---- the command line, no daemon -----------------------------------------------------------------

def _pairs(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == flag]


def test_engine_runs_as_the_entrypoint_on_a_mapped_port(tmp_path):
    plan = _plan(tmp_path, _container(args=["--shm-size", "1g", "-v", "$TUNER_CACHE:/c:ro"]),
                 env={"HF_TOKEN": "hf_secret_value", "VLLM_X": "1"})
    argv, model = plan.argv, str(tmp_path / "model")
    head = ["docker", "run", "--pull", "never", "--name", "tuner-s-trial-0001-abc123",
            "--cidfile", str(tmp_path / "container.id"), "-p", "127.0.0.1:8123:8123"]
    assert argv[:len(head)] == head
    i = argv.index("--entrypoint")
    assert argv[i:i + 4] == ["--entrypoint", "/venv/bin/vllm", IMAGE, "serve"]
    assert argv[i + 4:i + 9] == [model, "--host", "0.0.0.0", "--port", "8123"]
    assert plan.host == "127.0.0.1" and plan.port == 8123  # where the client connects
    options = argv[len(head):i]
    assert _pairs(options, "-v") == [f"{model}:{model}:ro", f"{cache_dir()}:/c:ro"]
    # Env goes by name: the runtime takes the value from its own environment, never the argv.
    assert _pairs(options, "-e") == ["HF_TOKEN", "VLLM_X"]
    assert plan.env["HF_TOKEN"] == "hf_secret_value" and "hf_secret_value" not in " ".join(argv)
    # The space's own args come last, expanded like fixed_args.
    assert options[-4:] == ["--shm-size", "1g", "-v", f"{cache_dir()}:/c:ro"]
    assert "--gpus" not in argv
    assert plan.container.name == "tuner-s-trial-0001-abc123" and plan.container.image == IMAGE


@pytest.mark.parametrize("visible, expected", [
    (None, ["--gpus", "all"]),
    ("2,3", ["--gpus", '"device=2,3"']),  # quoted, or docker splits the value on the comma
    ("GPU-0a1b", ["--gpus", '"device=GPU-0a1b"']),
    ("", []),  # the scheduler gave this trial no GPU
])
def test_gpus_are_narrowed_to_the_trials_devices(tmp_path, monkeypatch, visible, expected):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    if visible is not None:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    argv = _plan(tmp_path, _container(gpus="all")).argv
    got = argv[argv.index("--gpus"):][:2] if "--gpus" in argv else []
    assert got == expected


def test_devices_set_in_the_space_env_narrow_gpus_instead_of_reaching_the_container(tmp_path,
                                                                                  monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    plan = _plan(tmp_path, _container(gpus="all"), env={"CUDA_VISIBLE_DEVICES": "3"})
    assert plan.argv[plan.argv.index("--gpus") + 1] == '"device=3"'
    assert "CUDA_VISIBLE_DEVICES" not in plan.argv  # inside, the one GPU is device 0
    no_gpus = _plan(tmp_path, _container())
    assert "--gpus" not in no_gpus.argv


def test_a_generated_config_file_is_mounted(tmp_path):
    cfg = str(tmp_path / "trtllm-config.yaml")
    plan = _plan(tmp_path, _container(), engine="trtllm", knobs={"gpu_memory_utilization": 0.8},
                 config_path=cfg)
    assert f"{cfg}:{cfg}:ro" in plan.argv and plan.argv[-2:] == ["--extra_llm_api_options", cfg]


def test_container_names_are_recognisable_and_unique():
    a, b = unique_name("my space", "trial-0007"), unique_name("my space", "trial-0007")
    assert re.fullmatch(r"tuner-my-space-trial-0007-[0-9a-f]{6}", a) and a != b


def _space_with(tmp_path: Path, container: dict) -> Path:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["engines"]["vllm"]["container"] = container
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("container, message", [
    ({"image": IMAGE, "args": ["--name=x"]}, "--name is set by the tuner"),
    ({"image": IMAGE, "args": ["-p", "80:80"]}, "-p is set by the tuner"),
    ({"image": IMAGE, "args": ["--gpus", "all"]}, "set `gpus:` instead"),
    ({"image": "vllm openai"}, "is not an image name"),
    ({"image": IMAGE, "runtime": "lxc"}, "Input should be 'docker' or 'podman'"),
    ({"image": IMAGE, "gpus": 2}, "Input should be 'all'"),
    ({"args": []}, "engines.vllm.container.image: Field required"),
])
def test_bad_container_options_name_the_key(tmp_path, container, message):
    with pytest.raises(InputError) as err:
        load_space(str(_space_with(tmp_path, container)))
    assert message in str(err.value) and "space.yaml:" in str(err.value)
    assert "engines.vllm.container" in str(err.value)


def test_secrets_in_container_args_are_masked():
    argv = ["docker", "run", "-e", "HF_TOKEN=hf_abcdef", "--env=API_KEY=k123456", "-e", "HOME=/tmp",
            "-e", "HF_TOKEN", "-e", "HF_TOKEN=${HF_TOKEN}"]
    assert redact_argv(argv) == ["docker", "run", "-e", f"HF_TOKEN={MASK}", f"--env=API_KEY={MASK}",
                                 "-e", "HOME=/tmp", "-e", "HF_TOKEN", "-e", "HF_TOKEN=${HF_TOKEN}"]
    stored = redact_space({"engines": {"vllm": {"container": {"image": IMAGE, "args": argv[2:4]}}}})
    assert stored["engines"]["vllm"]["container"]["args"] == ["-e", f"HF_TOKEN={MASK}"]


@pytest.mark.parametrize("log, expected", [
    # Real docker 20.10 messages, as the `docker run` client writes them to the trial log.
    ("docker: Error response from daemon: No such image: tuner/nope:1", "container-error"),
    ("docker: Error response from daemon: Unknown runtime specified nosuch", "container-error"),
    ('docker: Error response from daemon: could not select device driver "" with capabilities: '
     "[[gpu]]", "container-error"),
    ("docker: Error response from daemon: failed to create shim task: OCI runtime create failed: "
     'runc create failed: unable to start container process: exec: "/nope": stat /nope: no such '
     "file or directory: unknown", "container-error"),
    ("docker: Error response from daemon: driver failed programming external connectivity on "
     "endpoint x (1d36): Bind for 127.0.0.1:18780 failed: port is already allocated",
     "port-in-use"),
    ("docker: Error response from daemon: driver failed programming external connectivity on "
     "endpoint x (224f): Error starting userland proxy: listen tcp4 127.0.0.1:18779: bind: address "
     "already in use", "port-in-use"),
    ("unknown flag: --nosuchflag\nSee 'docker run --help'.", "container-error"),
    ("ValueError: max_num_batched_tokens (256) is smaller than max_model_len (2048)",
     "invalid-config"),  # the engine's own signatures still apply
])
def test_runtime_errors_are_classified_and_not_blamed_on_the_config(log, expected):
    failure = classify_exit(with_runtime_failures(load_engine("vllm")), log, 125)
    assert failure.failure_class == expected
    assert (expected in NOT_THE_CONFIG) == (expected != "invalid-config")
    assert all(s.failure_class in NOT_THE_CONFIG for s in runtime_failures())


def test_a_missing_runtime_is_named(monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(InputError, match="container runtime 'podman' .* is not on PATH"):
        inspect_image("podman", IMAGE)


# ---- real containers -----------------------------------------------------------------------------

def _docker(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def hostfs_image(tmp_path_factory) -> str:
    """An empty image: containers run the host's binaries through read-only bind mounts."""
    if shutil.which("docker") is None or _docker("info").returncode != 0:
        no_docker("no Docker daemon answers (`docker info` failed): container launches need one; "
                  "scripts/test.sh starts one as root (scripts/docker_daemon.sh)")
    created = _docker("image", "inspect", IMAGE).returncode != 0
    if created:
        empty = tmp_path_factory.mktemp("image") / "empty.tar"
        subprocess.run(["tar", "cf", str(empty), "--files-from", "/dev/null"], check=True)
        subprocess.run(["docker", "import", str(empty), IMAGE], check=True, capture_output=True)
    yield IMAGE
    if created:
        _docker("image", "rm", IMAGE)


def _host_mounts(vllm_bin: Path) -> list[str]:
    python_prefix = Path(os.path.realpath(vllm_bin.parent / "python3")).parents[1]
    paths = ["/usr", "/lib", "/lib64", "/bin", "/etc", str(python_prefix), str(cache_dir())]
    args = []
    for p in paths:
        if os.path.exists(p):
            args += ["-v", f"{p}:{p}:ro"]
    # The root filesystem is the empty image's: vLLM needs a writable home for its caches.
    return args + ["--tmpfs", "/tmp", "-e", "HOME=/tmp"]


def container_space(tmp_path: Path, vllm_bin: Path, *, name: str, n_trials: int, num_prompts: int,
                    image: str = IMAGE, extra_args: list[str] = ()) -> Path:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    data["name"] = name
    data["engines"]["vllm"]["container"] = {"image": image,
                                            "args": _host_mounts(vllm_bin) + list(extra_args)}
    data["workload"]["num_prompts"] = num_prompts
    data["budget"]["n_trials"] = n_trials
    data["baselines"] = [{"name": "vllm-defaults", "engine": "vllm"}]
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _containers(prefix: str) -> list[str]:
    out = _docker("ps", "-a", "--filter", f"name={prefix}", "--format", "{{.Names}}").stdout
    return [n for n in out.split() if n.startswith(prefix)]


def _unique(stem: str) -> str:
    return f"{stem}-{secrets.token_hex(2)}"


@pytest.mark.engine
def test_study_in_containers_removes_each_container(tmp_path, studies, hostfs_image, vllm_bin,
                                                    tiny_model_path):
    name = _unique("ctr")
    proc = run_tune("start", "--space", str(container_space(tmp_path, vllm_bin, name=name,
                                                             n_trials=2, num_prompts=32)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = [t for t in load(studies, name).trials if launched(t)]  # rules may prune some
    assert len(trials) == 2
    for t in trials:
        assert t.state == optuna.trial.TrialState.COMPLETE, t.user_attrs
        assert t.user_attrs["feasible"], t.user_attrs
        argv = t.user_attrs["argv"]
        assert argv[:2] == ["docker", "run"] and argv[argv.index("--entrypoint") + 2] == IMAGE
        assert t.user_attrs["engine_version"] == "0.32.0"
        assert t.user_attrs["environment"]["engine_image"].startswith(f"{IMAGE} (id sha256:")
        trial_dir = studies / f"{name}-files" / "trials" / f"trial-{t.number:04d}"
        log = (trial_dir / "server.log").read_text()
        assert f"# image: {IMAGE} (id sha256:" in log
        assert "Starting vLLM server on http://0.0.0.0:" in log and "POST /v1/completions" in log
        assert not (trial_dir / "container.id").exists()  # removed with the container
    # Telemetry follows the engine's processes inside the container (GiBs), not the `docker run`
    # client (tens of MiB).
    assert max(t.user_attrs.get("engine_rss_peak_mib", 0) for t in trials) > 500
    assert _containers(f"tuner-{name}-") == []
    assert orphans.orphans() == []


@pytest.mark.engine
def test_resume_removes_the_container_of_a_killed_tuner(tmp_path, studies, hostfs_image, vllm_bin,
                                                        tiny_model_path):
    name = _unique("ctrkill")
    space = container_space(tmp_path, vllm_bin, name=name, n_trials=1, num_prompts=8)
    proc = subprocess.Popen([str(TUNE), "start", "--space", str(space)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    log = studies / f"{name}-files" / "trials" / "trial-0000" / "server.log"
    try:
        wait_for(lambda: log.exists() and "Application startup complete" in log.read_text(), 300,
                  "the engine in its container to serve", proc)
        proc.kill()  # SIGKILL: no cleanup runs
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    (left,) = _containers(f"tuner-{name}-trial-0000-")
    assert _docker("inspect", "--format", "{{.State.Running}}", left).stdout.strip() == "true"

    resumed = run_tune("resume", name)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"in container {left}" in resumed.stdout
    assert _containers(f"tuner-{name}-") == []
    first, retry = load(studies, name).trials
    assert first.state == optuna.trial.TrialState.FAIL and first.user_attrs["interrupted"]
    assert retry.user_attrs["retry_of"] == 0 and retry.user_attrs["feasible"]
    assert orphans.orphans() == []


@pytest.mark.engine
def test_missing_image_fails_before_any_launch_and_says_to_pull(tmp_path, studies, hostfs_image,
                                                                vllm_bin, tiny_model_path):
    name, image = _unique("ctrpull"), "tuner/not-pulled:never"
    proc = run_tune("start", "--space", str(container_space(tmp_path, vllm_bin, name=name,
                                                             n_trials=1, num_prompts=8,
                                                             image=image)))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    # tune start's preflight (tune doctor's cheap checks) names the image and the pull to run
    assert f"image {image}" in proc.stdout and "docker pull" in proc.stdout, proc.stdout
    assert "fix the failing ones first" in proc.stderr
    assert _containers(f"tuner-{name}-") == []
    assert not list(studies.glob("*-files/trials/*/server.log"))  # nothing was launched
    assert not (studies / f"{name}.db").exists()  # refused before the study was created


@pytest.mark.engine
def test_runtime_refusal_fails_the_trial_instead_of_teaching_the_sampler(tmp_path, studies,
                                                                         hostfs_image, vllm_bin,
                                                                         tiny_model_path):
    name = _unique("ctrrt")
    space = container_space(tmp_path, vllm_bin, name=name, n_trials=1, num_prompts=8,
                            extra_args=["--runtime", "nosuch"])
    proc = run_tune("start", "--space", str(space))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "3 trials in a row failed in the tuner itself; last: " in proc.stderr
    trials = [t for t in load(studies, name).trials if launched(t)]  # rules may prune some
    assert trials and all(t.state == optuna.trial.TrialState.FAIL for t in trials)
    assert "container-error" in trials[0].user_attrs["harness_error"]
    assert "Unknown runtime specified nosuch" in trials[0].user_attrs["harness_error"]
    assert _containers(f"tuner-{name}-") == []


_ABANDON = textwrap.dedent("""
    import os, signal, sys
    from tuner.configs import container
    from tuner.runtime import launcher, procgroup
    from tuner.engines.spec import Readiness, load_engine
    from tuner.space import Container
    from tuner.configs.translate import LaunchPlan
    from tuner.configs.container import ContainerLaunch
    python, image, workdir, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    port = procgroup.free_port()
    launch = ContainerLaunch("docker", image, container.unique_name("abandon"), "container.id")
    argv = container.run_argv(Container(image=image, args=args), [python, "-m", "http.server",
                              str(port), "--bind", "0.0.0.0"], name=launch.name,
                              cidfile=launch.cidfile, port=port, env_names=[], mounts=[],
                              visible_devices=None)
    plan = LaunchPlan("http", argv, {}, "", "", port, container=launch)
    spec = load_engine("vllm").model_copy(update={"readiness": Readiness(path="/")})
    server = launcher.start(plan, spec, __import__("pathlib").Path(workdir) / "server.log")
    launcher.wait_ready(server, 60)
    os.killpg(server.pgid, signal.SIGKILL)  # the `docker run` client dies too ...
    server.proc.wait()
    print(launch.name, flush=True)
    os._exit(0)  # ... and nothing removes the container
""")


@pytest.mark.engine
def test_reap_removes_a_container_whose_client_is_gone_too(tmp_path, monkeypatch, hostfs_image,
                                                           vllm_bin):
    monkeypatch.setenv("TUNER_CACHE", str(tmp_path / "cache"))  # a registry of this test's own
    python = os.path.realpath(vllm_bin.parent / "python3")
    out = subprocess.run([sys.executable, "-c", _ABANDON, python, IMAGE, str(tmp_path),
                          *_host_mounts(vllm_bin)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TUNER_CACHE": str(tmp_path / "cache")})
    assert out.returncode == 0, out.stdout + out.stderr
    name = out.stdout.strip()
    assert _containers(name) == [name]
    (entry,) = orphans.orphans()
    assert entry.container == name and not entry.leader_alive()
    assert orphans.reap() == [entry]
    assert _containers(name) == [] and orphans.orphans() == []
