"""`tuner.deploy`: a trial recorded by the real recorder becomes a command, a compose file and a
Kubernetes Deployment + Service; compose is validated by `compose config` (the docker CLI's plugin,
else Debian's standalone docker-compose: scripts/docker_daemon.sh installs one), Kubernetes offline
against the schemas of a pinned version; no secret value leaks."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import optuna
import pytest
import yaml

from tests.helpers import no_docker
from tuner import deploy
from tuner.configs.translate import build_plan
from tuner.engines.spec import load_engine
from tuner.errors import InputError
from tuner.paths import SPACES_DIR
from tuner.space import Space, space_from_dict
from tuner.study.recorder import TrialRecorder
from tuner.trial.runner import TrialOutcome

K8S_VERSION = "1.31.0"  # a version whose schemas kubernetes-validate ships
HF_TOKEN = "hf_deploytestSECRETvalue"
API_KEY = "sk-deploytest-SECRET-key"
CLOUD_TOKEN = "cloud-token-SECRET-value"
SECRETS = (HF_TOKEN, API_KEY, CLOUD_TOKEN)


def _space(engine: str, *, container: dict | None = None, **extra) -> Space:
    data = yaml.safe_load((SPACES_DIR / "cpu-smoke.yaml").read_text())
    if engine == "vllm":
        data["engines"]["vllm"].update(extra)
        if container is not None:
            data["engines"]["vllm"]["container"] = container
            data["engines"]["vllm"].pop("command")
    else:
        a100 = yaml.safe_load((SPACES_DIR / "a100-throughput.yaml").read_text())
        data["model"] = a100["model"]
        data["engines"] = {engine: {**a100["engines"][engine], **extra}}
        data["baselines"] = []
    return space_from_dict(data)


def _recorded(tmp_path: Path, space: Space, engine: str, knobs: dict, *,
              gpus: bool = False) -> optuna.trial.FrozenTrial:
    """A trial as the study records it: the trial runner's plan, stored by the real recorder."""
    spec = load_engine(engine)
    trial_dir = tmp_path / "trial-0"
    trial_dir.mkdir(exist_ok=True)
    config_path = (str(trial_dir / f"{engine}-config.{spec.config_file.format}")
                   if spec.config_file else None)
    plan = build_plan(spec, space.engines[engine], space.model, knobs, port=41237,
                      config_path=config_path, container_name="tuner-test-0",
                      cidfile=str(trial_dir / "container.id"))
    study = optuna.create_study(direction="maximize")
    recorder = TrialRecorder(study, space, "sqlite://", artifacts=False)
    if gpus:  # the GPU host the study ran on, as its fingerprint says
        recorder.env = {**recorder.env, "gpus": [{"index": 0, "name": "NVIDIA H200"}]}
    trial = study.ask()
    trial.set_user_attr("engine", engine)
    metrics = {"total_token_throughput": 100.0}
    value = recorder.record(trial, TrialOutcome(
        plan, trial_dir / "server.log", metrics=metrics,
        workload_metrics={w.name: metrics for w in space.all_workloads()}))
    study.tell(trial, value)
    return study.trials[-1]


@pytest.fixture
def secrets_env(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", HF_TOKEN)
    monkeypatch.setenv("CLOUD_TOKEN", CLOUD_TOKEN)


def _host_trial(tmp_path):
    space = _space("vllm", fixed_args=["--enforce-eager", "--load-format", "dummy",
                                       "--api-key", API_KEY])
    knobs = {"max_num_seqs": 8, "max_num_tokens": 512, "chunked_prefill": True}
    return space, _recorded(tmp_path, space, "vllm", knobs)


def _container_trial(tmp_path):
    space = _space("vllm", container={
        "image": "vllm/vllm-openai:v0.11.0", "gpus": "all",
        "args": ["--shm-size", "16g", "-v", "/srv/models:/srv/models:ro", "--ulimit",
                 "memlock=-1", "-e", "CLOUD_TOKEN", "--cap-add", "SYS_NICE"]},
        env={"VLLM_NO_USAGE_STATS": "1", "HF_TOKEN": "${HF_TOKEN}"})
    space = space.model_copy(update={"model": space.model.model_copy(update={"path": "Qwen/Qwen3-14B"})})
    knobs = {"max_num_seqs": 64, "tensor_parallel": 2}
    return space, _recorded(tmp_path, space, "vllm", knobs, gpus=True)


def _trtllm_trial(tmp_path):
    space = _space("trtllm")  # a host command: trtllm-serve
    knobs = {"max_num_seqs": 256, "chunked_prefill": True, "gpu_memory_utilization": 0.9,
             "kv_cache_dtype": "fp8", "max_seq_len": 16384}
    return space, _recorded(tmp_path, space, "trtllm", knobs, gpus=True)


# ---- the command --------------------------------------------------------------------------------

def test_command_drops_the_trials_host_and_port_and_keeps_what_was_measured(tmp_path, secrets_env):
    space, trial = _host_trial(tmp_path)
    assert "41237" in trial.user_attrs["command"]  # the trial's own port was recorded
    d = deploy.deployment_from_trial(trial, space)
    command = deploy.render_command(d)
    line = command.splitlines()[-1]
    assert "127.0.0.1" not in command and "41237" not in command
    assert "--host 0.0.0.0 --port 8000" in line  # vLLM's own default port
    for flag in ("--max-num-seqs 8", "--max-num-batched-tokens 512", "--enable-chunked-prefill",
                 "--load-format dummy", "--served-model-name tiny-qwen3", "VLLM_CPU_KVCACHE_SPACE=1"):
        assert flag in line
    assert '--api-key "${API_KEY}"' in line  # the masked key becomes a reference
    assert line.split()[3].endswith("/engines/vllm-cpu/bin/vllm")  # the host command as measured
    d = deploy.deployment_from_trial(trial, space, port=9001, host="10.0.0.5")
    assert "--host 10.0.0.5 --port 9001" in deploy.render_command(d)


def test_sglang_deploys_on_its_own_default_port(tmp_path):
    space = _space("sglang")
    trial = _recorded(tmp_path, space, "sglang", {"max_num_seqs": 64}, gpus=True)
    d = deploy.deployment_from_trial(trial, space, image="lmsysorg/sglang:v0.5.5.post1")
    assert d.port == 30000 and d.command == ["python3", "-m", "sglang.launch_server"]
    assert "--port 30000" in deploy.render_command(d)


def test_a_host_command_needs_an_image_for_compose_and_kubernetes(tmp_path):
    space, trial = _host_trial(tmp_path)
    d = deploy.deployment_from_trial(trial, space)
    for fmt in ("compose", "kubernetes"):
        with pytest.raises(InputError, match="needs an image: pass --image"):
            deploy.render(d, fmt)
    d = deploy.deployment_from_trial(trial, space, image="vllm/vllm-openai:v0.11.0")
    assert d.command == ["vllm", "serve"]  # the image's command, not the host venv's path
    assert "docker run" in deploy.render_command(d)


# ---- compose ------------------------------------------------------------------------------------

def test_compose_service_from_a_container_trial(tmp_path, secrets_env):
    space, trial = _container_trial(tmp_path)
    d = deploy.deployment_from_trial(trial, space)
    text = deploy.render_compose(d)
    service = yaml.safe_load(text)["services"][d.name]
    assert service["image"] == "vllm/vllm-openai:v0.11.0"
    assert service["entrypoint"] == ["vllm", "serve"] and service["command"][0] == "Qwen/Qwen3-14B"
    assert "--tensor-parallel-size" in service["command"]
    assert service["ports"] == ["0.0.0.0:8000:8000"]
    assert service["deploy"]["resources"]["reservations"]["devices"] == [
        {"driver": "nvidia", "count": 2, "capabilities": ["gpu"]}]
    assert service["environment"]["HF_TOKEN"] == "${HF_TOKEN:?set HF_TOKEN in the environment}"
    assert service["environment"]["CLOUD_TOKEN"] == "${CLOUD_TOKEN:?set CLOUD_TOKEN in the environment}"
    assert service["environment"]["VLLM_NO_USAGE_STATS"] == "1"
    assert service["shm_size"] == "16g" and "ipc" not in service  # the space's own choice wins
    assert service["ulimits"] == {"memlock": -1}
    assert "huggingface:/root/.cache/huggingface" in service["volumes"]
    assert "/srv/models:/srv/models:ro" in service["volumes"]
    assert "http://127.0.0.1:8000/health" in service["healthcheck"]["test"][-1]
    assert "Not carried over from the space's container args: --cap-add SYS_NICE" in text
    for tuner_only in ("--pull", "--cidfile", "tuner-test-0", "41237", "127.0.0.1:41237"):
        assert tuner_only not in text


def test_compose_with_a_generated_engine_config(tmp_path):
    space, trial = _trtllm_trial(tmp_path)
    d = deploy.deployment_from_trial(trial, space, image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1")
    assert d.config_file is not None and "kv_cache_config" in d.config_file.text
    doc = yaml.safe_load(deploy.render_compose(d))
    service = doc["services"][d.name]
    assert service["command"][-2:] == ["--extra_llm_api_options", "/etc/tuner/trtllm-config.yaml"]
    assert str(tmp_path) not in yaml.safe_dump(doc)  # the trial folder stays behind
    # The space mounts the host's Hugging Face cache: no named volume there too (docker refuses a
    # duplicate mount point).
    assert service["volumes"] == [f"{Path.home()}/.cache/huggingface:/root/.cache/huggingface"]
    assert "volumes" not in doc
    assert service["ipc"] == "host"  # TensorRT-LLM needs shared memory
    assert "kv_cache_config" in doc["configs"]["trtllm-config-yaml"]["content"]


INLINE_CONFIGS = (2, 23, 1)  # the first Compose with top-level `configs: {name: {content: ...}}`


def _compose() -> tuple[list[str], tuple[int, ...]]:
    """The compose command here and its version: the docker CLI's plugin, else the standalone
    docker-compose (Debian 12's is Compose 1.29.2)."""
    for argv in (["docker", "compose"], ["docker-compose"]):
        if shutil.which(argv[0]) is None:
            continue
        out = subprocess.run([*argv, "version", "--short"], capture_output=True, text=True,
                             check=False)
        found = re.match(r"v?(\d+)\.(\d+)\.(\d+)", out.stdout.strip())
        if out.returncode == 0 and found:
            return argv, tuple(int(n) for n in found.groups())
    no_docker("no compose command here (neither `docker compose` nor `docker-compose`): the "
              "compose file is not validated; scripts/test.sh installs Debian's as root "
              "(scripts/docker_daemon.sh)")


def _configs_to_files(text: str, folder: Path) -> str:
    """The same file with each inline config in a file beside it, for a Compose that predates
    inline configs; all else as written."""
    doc = yaml.safe_load(text)
    for name, config in doc.get("configs", {}).items():
        (folder / name).write_text(config.pop("content").replace("$$", "$"))
        config["file"] = f"./{name}"
    return yaml.safe_dump(doc, sort_keys=False)


@pytest.mark.parametrize("make", ["_host_trial", "_container_trial", "_trtllm_trial"])
def test_docker_compose_config_accepts_the_file(tmp_path, make):
    space, trial = globals()[make](tmp_path)
    text = deploy.render_compose(deploy.deployment_from_trial(trial, space, image="example/engine:1"))
    compose, version = _compose()
    if version < INLINE_CONFIGS and "content:" in text:
        text = _configs_to_files(text, tmp_path)
    path = tmp_path / "compose.yaml"
    path.write_text(text)
    config = [*compose, "-f", str(path), "config", "--quiet"]
    refs = {"API_KEY", "HF_TOKEN", "CLOUD_TOKEN"} & set(re.findall(r"\$\{(\w+):\?", text))
    if refs:  # a required secret that is unset stops compose with its name
        out = subprocess.run(config, capture_output=True, text=True, check=False,
                             env={k: v for k, v in os.environ.items() if k not in refs})
        assert out.returncode != 0 and "in the environment" in out.stderr, out.stderr
    out = subprocess.run(config, capture_output=True, text=True, check=False,
                         env={**os.environ, **{name: "set-by-the-test" for name in refs}})
    assert out.returncode == 0, out.stderr


# ---- Kubernetes ---------------------------------------------------------------------------------

def _k8s(text: str) -> list[dict]:
    import kubernetes_validate
    docs = list(yaml.safe_load_all(text))
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    return docs


def test_kubernetes_deployment_and_service_validate(tmp_path, secrets_env):
    space, trial = _container_trial(tmp_path)
    d = deploy.deployment_from_trial(trial, space)
    docs = _k8s(deploy.render_kubernetes(d))
    assert [x["kind"] for x in docs] == ["Deployment", "Service"]
    pod = docs[0]["spec"]["template"]["spec"]
    c = pod["containers"][0]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert c["readinessProbe"]["httpGet"] == {"path": "/health", "port": 8000}
    env = {e["name"]: e for e in c["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": f"{d.name}-secrets",
                                                            "key": "HF_TOKEN"}
    assert env["CLOUD_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "CLOUD_TOKEN"
    shm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    assert docs[1]["spec"]["ports"][0]["port"] == 8000


def test_kubernetes_with_a_config_map_and_a_local_model(tmp_path, secrets_env):
    space, trial = _trtllm_trial(tmp_path)
    d = deploy.deployment_from_trial(trial, space, image="nvcr.io/nvidia/tensorrt-llm/release:1.2.0rc1")
    docs = _k8s(deploy.render_kubernetes(d))
    assert [x["kind"] for x in docs] == ["ConfigMap", "Deployment", "Service"]
    assert "kv_cache_config" in docs[0]["data"]["trtllm-config.yaml"]
    space, trial = _host_trial(tmp_path)
    d = deploy.deployment_from_trial(trial, space, image="vllm/vllm-openai:v0.11.0", name="Tiny Qwen!")
    docs = _k8s(deploy.render_kubernetes(d))
    c = docs[0]["spec"]["template"]["spec"]["containers"][0]
    assert d.name == "tiny-qwen" and "resources" not in c  # a CPU study reserves no GPU
    assert "$(API_KEY)" in c["args"]  # Kubernetes expands it from the Secret-backed env
    volume = docs[0]["spec"]["template"]["spec"]["volumes"][0]
    assert volume["hostPath"]["path"] == d.model_dir and d.model_dir.endswith("tiny-qwen3")


def test_the_validator_rejects_a_broken_manifest(tmp_path):
    """The schema check can fail: a Deployment without containers is refused."""
    import kubernetes_validate
    space, trial = _container_trial(tmp_path)
    docs = _k8s(deploy.render_kubernetes(deploy.deployment_from_trial(trial, space)))
    docs[0]["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(docs[0], K8S_VERSION, strict=True)


# ---- secrets ------------------------------------------------------------------------------------

def test_no_secret_value_appears_in_any_output(tmp_path, secrets_env):
    outputs = []
    for make in (_host_trial, _container_trial, _trtllm_trial):
        space, trial = make(tmp_path)
        image = None if make is _container_trial else "example/engine:1"
        d = deploy.deployment_from_trial(trial, space, image=image)
        outputs += [deploy.render(d, fmt) for fmt in deploy.FORMATS]
        outputs.append(deploy.render_command(deploy.deployment_from_trial(trial, space)))
    assert len(outputs) == 12
    for text in outputs:
        for value in SECRETS:
            assert value not in text
    assert any("${API_KEY}" in t for t in outputs) and any("${HF_TOKEN:" in t for t in outputs)


def test_a_trial_that_launched_nothing_is_refused(tmp_path):
    space, _ = _host_trial(tmp_path)
    trial = optuna.trial.create_trial(value=1.0, user_attrs={"reused_from": 3})
    with pytest.raises(InputError, match="repeats trial 3"):
        deploy.deployment_from_trial(trial, space)
