"""Take a finished trial out of the tuner: the serve command a user runs, a docker compose service, or
a Kubernetes Deployment + Service.

A trial ran the engine for the tuner's own use: on 127.0.0.1 and an ephemeral port, its config file
in the trial's folder, and in container mode under the tuner's container name, id file and
``--pull never``. A deployment keeps what was measured (the engine's command, knob flags, fixed args,
env, image) and replaces only those. Secrets go by reference (``${HF_TOKEN}``, a Kubernetes Secret),
never by value: the recorded argv and env are redacted already, and a masked value becomes a
reference to an environment variable named after its flag.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from typing import Any, Literal

import yaml
from optuna.trial import FrozenTrial

from tuner.configs.translate import build_plan
from tuner.engines.spec import EngineSpec, load_engine
from tuner.errors import InputError
from tuner.record import schema
from tuner.redact import MASK, is_secret_name
from tuner.space import Space

Format = Literal["command", "compose", "kubernetes"]
FORMATS: tuple[Format, ...] = ("command", "compose", "kubernetes")
HF_CACHE = "/root/.cache/huggingface"  # where the engines' official images (run as root) cache weights
CONFIG_DIR = "/etc/tuner"              # where a generated engine config file is mounted in a container
_REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")
_PLACEMENT_ENV = {"CUDA_VISIBLE_DEVICES"}  # the orchestrator places the GPUs, not the trial's pinning


@dataclass(frozen=True)
class ConfigFile:
    """A generated engine config (TensorRT-LLM's ``--extra_llm_api_options`` YAML)."""

    name: str
    flag: str
    text: str


@dataclass(frozen=True)
class Deployment:
    """What the trial ran, ready to render. ``args`` hold ``${NAME}`` for values passed by reference."""

    name: str
    source: str
    engine: str
    command: list[str]
    args: list[str]
    listen_at: int                 # where the host and port flags go in ``args``
    env: dict[str, str]
    secrets: dict[str, bool]       # env name -> required (HF_TOKEN for a hub model is optional)
    image: str | None
    docker_args: list[str]         # the space's container.args, as recorded
    gpus: int
    port: int
    host: str
    health_path: str
    startup_s: float
    shared_memory: bool
    model_dir: str | None          # a local checkpoint, mounted read-only at the same path
    config_file: ConfigFile | None

    @property
    def spec(self) -> EngineSpec:
        return load_engine(self.engine)


def dns_name(text: str) -> str:
    """A DNS-1123 label (Kubernetes object and compose service names)."""
    name = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:63].strip("-")
    return name or "engine"


def deployment_from_trial(trial: FrozenTrial, space: Space, *, port: int | None = None,
                          host: str = "0.0.0.0", image: str | None = None,
                          name: str | None = None) -> Deployment:
    """The deployment of one launched trial. ``image`` runs a trial that used a host command from
    that image instead (compose and Kubernetes need one); ``port`` defaults to the engine's own."""
    ua = trial.user_attrs
    engine, argv = ua.get(schema.ENGINE), ua.get(schema.ARGV)
    if not engine or not argv:
        why = (f"it repeats trial {ua[schema.REUSED_FROM]}" if schema.REUSED_FROM in ua
               else "it was decided without a launch")
        raise InputError(f"trial {trial.number} launched nothing to deploy: {why}")
    if engine not in space.engines:
        raise InputError(f"trial {trial.number} ran engine {engine!r}, which the study's space lacks")
    spec, choice = load_engine(engine), space.engines[engine]
    ran_image, docker_args = None, []
    if choice.container is not None:
        argv, ran_image, docker_args = _split_docker_run(argv, len(choice.container.args))
    n_cmd = len(choice.command or spec.command)
    command, rest = list(argv[:n_cmd]), list(argv[n_cmd:])
    if image is not None and ran_image is None:
        command = list(spec.command)  # a host venv's path means nothing inside an image
    rest, listen_at, had_config = _strip_tuner_flags(rest, spec)
    secrets: dict[str, bool] = {}
    rest = [_by_reference(rest, i, secrets) for i in range(len(rest))]
    env: dict[str, str] = {}
    for key, value in (ua.get(schema.ENV_VARS) or {}).items():
        if key in _PLACEMENT_ENV:
            continue
        if is_secret_name(key) or value == MASK or _REF.match(value):
            secrets[key] = True
        else:
            env[key] = value
    options, docker_args = _docker_options(docker_args, keep=("env",))
    for item in options.get("env", []):  # `-e NAME` passes the value through: a reference
        key, eq, value = item.partition("=")
        if eq and not (is_secret_name(key) or value == MASK or _REF.match(value)):
            env[key] = value
        else:
            secrets[key] = True
    model = rest[rest.index(spec.model_arg) + 1] if spec.model_arg in rest else (rest or [""])[0]
    model_dir = model if os.path.isabs(model) else None
    if model_dir is None:
        secrets.setdefault("HF_TOKEN", False)  # gated models need it; public ones do not
    knobs = ua.get(schema.KNOBS) or {}
    tp = int(knobs.get("tensor_parallel") or _flag_value(rest, spec, "tensor_parallel") or 1)
    if choice.container is not None:
        on_gpu = choice.container.gpus is not None
    else:
        on_gpu = bool((ua.get(schema.ENVIRONMENT) or {}).get("gpus"))
    config = None
    if had_config and spec.config_file is not None:
        plan = build_plan(spec, choice, space.model, knobs, port=spec.default_port,
                          omit=frozenset(ua.get(schema.OMIT) or ()))
        if plan.config_file is not None:
            config = ConfigFile(plan.config_file_name or f"{engine}-config.{spec.config_file.format}",
                                spec.config_file.flag, plan.config_file)
    return Deployment(
        name=dns_name(name or f"{space.name}-{engine}"), source=f"trial {trial.number}",
        engine=engine, command=command, args=rest, listen_at=listen_at, env=env, secrets=secrets,
        image=image or ran_image, docker_args=docker_args, gpus=tp if on_gpu else 0,
        port=port or spec.default_port, host=host, health_path=spec.readiness.path,
        startup_s=choice.startup_timeout_s or spec.readiness.startup_timeout_s,
        shared_memory=spec.shared_memory, model_dir=model_dir, config_file=config)


def render(d: Deployment, fmt: Format) -> str:
    if fmt == "command":
        return render_command(d)
    if fmt == "compose":
        return render_compose(d)
    if fmt == "kubernetes":
        return render_kubernetes(d)
    raise InputError(f"unknown deploy format {fmt!r}; choose one of {', '.join(FORMATS)}")


# ---- reading the recorded launch ----------------------------------------------------------------

def _split_docker_run(argv: list[str], n_space_args: int) -> tuple[list[str], str, list[str]]:
    """The engine argv inside, the image, and the space's own container args of a recorded
    ``docker run`` line (``tuner.configs.container.run_argv``: they come right before
    ``--entrypoint``)."""
    at = argv.index("--entrypoint") if "--entrypoint" in argv else len(argv)
    if at + 2 >= len(argv):
        raise InputError(f"the recorded launch is not a `docker run` line: {shlex.join(argv)}")
    entrypoint, image = argv[at + 1], argv[at + 2]
    return [entrypoint, *argv[at + 3:]], image, list(argv[at - n_space_args:at])


def _strip_tuner_flags(args: list[str], spec: EngineSpec) -> tuple[list[str], int, bool]:
    """``args`` without the host, port and config-file flags (the trial's loopback, ephemeral port
    and trial folder), where the first of them stood, and whether a config file was passed."""
    drop = {spec.host_flag, spec.port_flag}
    if spec.config_file is not None:
        drop.add(spec.config_file.flag)
    out: list[str] = []
    at, had_config, skip = None, False, False
    for arg in args:
        if skip:
            skip = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag in drop:
            at = len(out) if at is None else at
            had_config |= spec.config_file is not None and flag == spec.config_file.flag
            skip = not eq
            continue
        out.append(arg)
    return out, len(out) if at is None else at, had_config


def _by_reference(args: list[str], i: int, secrets: dict[str, bool]) -> str:
    """A masked secret becomes ``${FLAG_NAME}``; a reference stays one. Both are then passed from
    the environment."""
    arg = args[i]
    flag, eq, value = arg.partition("=")
    if eq and flag.startswith("-") and (value == MASK or _REF.match(value)):
        ref = _REF.match(value)
        name = ref.group(1) if ref else _env_name(flag)
        secrets[name] = True
        return f"{flag}=${{{name}}}"
    if arg == MASK or _REF.match(arg):
        ref = _REF.match(arg)
        name = ref.group(1) if ref else _env_name(args[i - 1] if i else "SECRET")
        secrets[name] = True
        return f"${{{name}}}"
    return arg


def _env_name(flag: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", flag.lstrip("-")).upper() or "SECRET"


def _flag_value(args: list[str], spec: EngineSpec, knob: str) -> str | None:
    flag = spec.knobs[knob].flag if knob in spec.knobs else None
    for i, arg in enumerate(args):
        if flag and arg == flag and i + 1 < len(args):
            return args[i + 1]
        if flag and arg.startswith(flag + "="):
            return arg.split("=", 1)[1]
    return None


# ---- the pieces every format shares -------------------------------------------------------------

def _engine_args(d: Deployment, host: str, config_dir: str) -> list[str]:
    spec = d.spec
    listen = [spec.host_flag, host, spec.port_flag, str(d.port)]
    args = [*d.args[:d.listen_at], *listen, *d.args[d.listen_at:]]
    if d.config_file is not None:
        args += [d.config_file.flag, f"{config_dir}/{d.config_file.name}"]
    return args


def _docker_options(args: list[str], keep: tuple[str, ...] = ()
                    ) -> tuple[dict[str, list[str]], list[str]]:
    """The space's ``docker run`` args by option (volumes, shm size, ipc, ulimits, runtime, env);
    the others (or only those not in ``keep``) are returned as they were."""
    names = {"-v": "volume", "--volume": "volume", "--shm-size": "shm_size", "--ipc": "ipc",
             "--ulimit": "ulimit", "--runtime": "runtime", "-e": "env", "--env": "env"}
    if keep:
        names = {k: v for k, v in names.items() if v in keep}
    known: dict[str, list[str]] = {}
    other: list[str] = []
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag in names:
            if not eq:
                i += 1
                value = args[i] if i < len(args) else ""
            known.setdefault(names[flag], []).append(value)
        else:
            other.append(args[i])
        i += 1
    return known, other


def _hf_cache_volume(d: Deployment, volumes: list[str]) -> bool:
    """Whether the deployment gets its own volume at HF_CACHE: where the model comes from the hub
    and the space's args mount nothing there already (docker refuses a duplicate mount point)."""
    targets = {v.split(":")[1] if ":" in v else v for v in volumes}  # SRC:DST[:MODE] or DST
    return d.model_dir is None and HF_CACHE not in targets


class _Dumper(yaml.SafeDumper):
    """No anchors (``&id001``) for repeated label maps; multi-line text (a config file) as a block."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


_Dumper.add_representer(str, lambda dumper, text: dumper.represent_scalar(
    "tag:yaml.org,2002:str", text, style="|" if "\n" in text else None))


def _dump(documents: list[dict[str, Any]]) -> str:
    return yaml.dump_all(documents, Dumper=_Dumper, sort_keys=False, width=100)


def _header(d: Deployment, notes: list[str]) -> str:
    lines = [f"# {d.spec.display_name} as measured by tune ({d.source}); generated by `tune deploy`.",
             *(f"# {n}" for n in notes)]
    return "\n".join(lines) + "\n"


def _needs_image(d: Deployment, fmt: str) -> str:
    if d.image is None:
        raise InputError(f"{d.source} ran {d.engine} from a host command ({d.command[0]}); {fmt} "
                         "needs an image: pass --image with the engine's image at the measured "
                         "version (e.g. vllm/vllm-openai:v0.11.0)")
    return d.image


def _size_to_k8s(size: str) -> str:
    """docker's ``16g`` -> Kubernetes' ``16Gi``."""
    m = re.fullmatch(r"(\d+)([bkmgBKMG]?)[bB]?", size.strip())
    if not m:
        return size
    unit = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m.group(2).lower()]
    return m.group(1) + unit


# ---- command ------------------------------------------------------------------------------------

_WITH_REFS = re.compile(r"^[\w./:=,@+-]*(\$\{[A-Za-z_]\w*\}[\w./:=,@+-]*)+$")


def _shell(args: list[str]) -> str:
    """shlex.join, except that ``${NAME}`` references are left for the shell to expand."""
    return " ".join(f'"{a}"' if _WITH_REFS.match(a) else shlex.quote(a) for a in args)


def render_command(d: Deployment) -> str:
    """The shell command: the host command as measured, or ``docker run`` of the image."""
    lines = []
    required = [n for n, req in d.secrets.items() if req]
    optional = [n for n, req in d.secrets.items() if not req]
    notes = ([f"needs {', '.join(required)} in the environment"] if required else []) + (
        [f"{', '.join(optional)} from the environment for a gated model"] if optional else [])
    if notes:
        lines.append("# " + "; ".join(notes))
    if d.config_file is not None:
        lines += [f"cat > {d.config_file.name} <<'EOF'", d.config_file.text.rstrip("\n"), "EOF"]
    if d.image is None:
        env = [f"{k}={shlex.quote(v)}" for k, v in sorted(d.env.items())]
        lines.append(" ".join([*env, _shell([*d.command, *_engine_args(d, d.host, ".")])]))
        return "\n".join(lines) + "\n"
    run = ["docker", "run", "--rm", "--name", d.name, "-p", f"{d.host}:{d.port}:{d.port}"]
    if d.gpus:
        run += ["--gpus", str(d.gpus)]
    options, _ = _docker_options(d.docker_args)
    if d.shared_memory and not ({"ipc", "shm_size"} & set(options)):
        run += ["--ipc", "host"]
    if d.model_dir is not None:
        run += ["-v", f"{d.model_dir}:{d.model_dir}:ro"]
    elif _hf_cache_volume(d, options.get("volume", [])):
        run += ["-v", f"huggingface:{HF_CACHE}"]
    if d.config_file is not None:
        run += ["-v", f"${{PWD}}/{d.config_file.name}:{CONFIG_DIR}/{d.config_file.name}:ro"]
    for name in d.secrets:
        run += ["-e", name]
    for key, value in sorted(d.env.items()):
        run += ["-e", f"{key}={value}"]
    run += [*d.docker_args, "--entrypoint", d.command[0], d.image, *d.command[1:],
            *_engine_args(d, "0.0.0.0", CONFIG_DIR)]
    lines.append(_shell(run))
    return "\n".join(lines) + "\n"


# ---- docker compose -----------------------------------------------------------------------------

def _compose_ref(name: str, required: bool = True) -> str:
    """A reference compose fills from the shell: a required one stops `docker compose up` with a
    message when unset; an optional one (HF_TOKEN) becomes empty."""
    return "${" + name + (f":?set {name} in the environment" if required else ":-") + "}"


def _compose_literal(value: str) -> str:
    """Compose interpolates ``$``: a literal dollar is ``$$``; a ``${NAME}`` reference stays one."""
    if _REF.match(value):
        return _compose_ref(_REF.match(value).group(1))
    flag, eq, rest = value.partition("=")
    if eq and _REF.match(rest):
        return flag.replace("$", "$$") + "=" + _compose_ref(_REF.match(rest).group(1))
    return value.replace("$", "$$")


def compose_document(d: Deployment) -> tuple[dict[str, Any], list[str]]:
    """The compose file as data, and the notes for its header."""
    image = _needs_image(d, "docker compose")
    options, other = _docker_options(d.docker_args)
    notes = [(f"docker compose up -d; the server answers on http://{d.host}:{d.port} once "
              f"GET {d.health_path} is healthy.")]
    if d.secrets:
        notes.append("Passed from your shell by reference: " + ", ".join(d.secrets) + ".")
    if other:
        notes.append("Not carried over from the space's container args: " + shlex.join(other))
    service: dict[str, Any] = {
        "image": image,
        "entrypoint": [_compose_literal(a) for a in d.command],
        "command": [_compose_literal(a) for a in _engine_args(d, "0.0.0.0", CONFIG_DIR)],
        "ports": [f"{d.host}:{d.port}:{d.port}"],
    }
    env = {k: _compose_literal(v) for k, v in sorted(d.env.items())}
    env.update({k: _compose_ref(k, required) for k, required in d.secrets.items()})
    if env:
        service["environment"] = env
    hf_volume = _hf_cache_volume(d, options.get("volume", []))
    volumes = ([f"{d.model_dir}:{d.model_dir}:ro"] if d.model_dir is not None else
               [f"huggingface:{HF_CACHE}"] if hf_volume else [])
    service["volumes"] = volumes + options.get("volume", [])
    if options.get("shm_size"):
        service["shm_size"] = options["shm_size"][-1]
    if options.get("ipc"):
        service["ipc"] = options["ipc"][-1]
    elif d.shared_memory and "shm_size" not in service:
        service["ipc"] = "host"
    if options.get("ulimit"):
        service["ulimits"] = {k: int(v) if v.lstrip("-").isdigit() else v
                              for k, _, v in (u.partition("=") for u in options["ulimit"])}
    if options.get("runtime"):
        service["runtime"] = options["runtime"][-1]
    if d.gpus:
        service["deploy"] = {"resources": {"reservations": {"devices": [
            {"driver": "nvidia", "count": d.gpus, "capabilities": ["gpu"]}]}}}
    probe = (f"import urllib.request; urllib.request.urlopen("
             f"'http://127.0.0.1:{d.port}{d.health_path}', timeout=5)")
    service["healthcheck"] = {"test": ["CMD", "python3", "-c", probe], "interval": "10s",
                              "timeout": "5s", "retries": 3, "start_period": f"{int(d.startup_s)}s"}
    doc: dict[str, Any] = {"services": {d.name: service}}
    if hf_volume:
        doc["volumes"] = {"huggingface": {}}
    if d.config_file is not None:
        key = dns_name(d.config_file.name)
        service["configs"] = [{"source": key, "target": f"{CONFIG_DIR}/{d.config_file.name}"}]
        doc["configs"] = {key: {"content": d.config_file.text.replace("$", "$$")}}
        notes.append("The engine's config file is inline (top-level configs.content: compose 2.23.1+).")
    return doc, notes


def render_compose(d: Deployment) -> str:
    doc, notes = compose_document(d)
    return _header(d, notes) + _dump([doc])


# ---- Kubernetes ---------------------------------------------------------------------------------

def _k8s_arg(value: str) -> str:
    """Kubernetes expands ``$(NAME)`` from the container's env in command and args; ``$$`` is a
    literal dollar."""
    flag, eq, rest = value.partition("=")
    if _REF.match(value):
        return "$(" + _REF.match(value).group(1) + ")"
    if eq and _REF.match(rest):
        return flag.replace("$(", "$$(") + "=$(" + _REF.match(rest).group(1) + ")"
    return value.replace("$(", "$$(")


def kubernetes_documents(d: Deployment) -> tuple[list[dict[str, Any]], list[str]]:
    """The Deployment, Service (and ConfigMap) as data, and the notes for the header."""
    image = _needs_image(d, "Kubernetes")
    options, other = _docker_options(d.docker_args)
    secret = f"{d.name}-secrets"
    labels = {"app.kubernetes.io/name": d.name, "app.kubernetes.io/managed-by": "tune-deploy"}
    notes = [(f"kubectl apply -f FILE; Service {d.name} answers on port {d.port} once the pod "
              f"is ready (GET {d.health_path}).")]
    if d.secrets:
        literals = " ".join(f'--from-literal={n}="${n}"' for n in d.secrets)
        notes.append(f"Secrets by reference: kubectl create secret generic {secret} {literals}")
    skipped = other + [f"--ulimit {u}" for u in options.get("ulimit", [])] + [
        f"--runtime {r}" for r in options.get("runtime", [])]
    if skipped:
        notes.append("Not carried over from the space's container args: " + " ".join(skipped))
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in sorted(d.env.items())]
    env += [{"name": n, "valueFrom": {"secretKeyRef": {"name": secret, "key": n,
                                                        **({} if req else {"optional": True})}}}
            for n, req in d.secrets.items()]
    mounts: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if _hf_cache_volume(d, options.get("volume", [])):
        notes.append(f"Weights download into an emptyDir at {HF_CACHE} on each start: use a "
                     "PersistentVolumeClaim to keep them.")
        volumes.append({"name": "huggingface", "emptyDir": {}})
        mounts.append({"name": "huggingface", "mountPath": HF_CACHE})
    elif d.model_dir is not None:
        notes.append(f"The model is read from {d.model_dir} on the node (hostPath).")
        volumes.append({"name": "model", "hostPath": {"path": d.model_dir, "type": "Directory"}})
        mounts.append({"name": "model", "mountPath": d.model_dir, "readOnly": True})
    for i, volume in enumerate(options.get("volume", [])):
        src, _, rest = volume.partition(":")
        dst, _, mode = rest.partition(":")
        if os.path.isabs(src) and dst:
            volumes.append({"name": f"mount-{i}", "hostPath": {"path": src}})
            mounts.append({"name": f"mount-{i}", "mountPath": dst, "readOnly": mode == "ro"})
        else:
            notes.append(f"Not carried over: volume {volume} (not a host path)")
    shm = options.get("shm_size")
    if d.shared_memory or shm:
        volumes.append({"name": "dshm", "emptyDir": {
            "medium": "Memory", **({"sizeLimit": _size_to_k8s(shm[-1])} if shm else {})}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    documents: list[dict[str, Any]] = []
    if d.config_file is not None:
        config_map = f"{d.name}-config"
        documents.append({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": config_map, "labels": labels},
                          "data": {d.config_file.name: d.config_file.text}})
        volumes.append({"name": "engine-config", "configMap": {"name": config_map}})
        mounts.append({"name": "engine-config", "mountPath": CONFIG_DIR, "readOnly": True})
    container: dict[str, Any] = {
        "name": d.engine,
        "image": image,
        "command": [_k8s_arg(a) for a in d.command],
        "args": [_k8s_arg(a) for a in _engine_args(d, "0.0.0.0", CONFIG_DIR)],
        "ports": [{"name": "http", "containerPort": d.port}],
        "readinessProbe": {"httpGet": {"path": d.health_path, "port": d.port},
                           "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 3},
        "startupProbe": {"httpGet": {"path": d.health_path, "port": d.port}, "periodSeconds": 10,
                         "failureThreshold": max(1, int(d.startup_s // 10) + 1)},
        "volumeMounts": mounts,
    }
    if env:
        container["env"] = env
    if d.gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": d.gpus}}
    documents.append({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": d.name, "labels": labels},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app.kubernetes.io/name": d.name}},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": [container], "volumes": volumes}}},
    })
    documents.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": d.name, "labels": labels},
        "spec": {"selector": {"app.kubernetes.io/name": d.name},
                 "ports": [{"name": "http", "port": d.port, "targetPort": "http"}]},
    })
    return documents, notes


def render_kubernetes(d: Deployment) -> str:
    documents, notes = kubernetes_documents(d)
    return _header(d, notes) + _dump(documents)


def serve_command(trial: FrozenTrial, space: Space | None) -> str | None:
    """What `tune best` and the reports print: the command a user runs (the engine's own port, the
    tuner's loopback binding and trial port left out), or the trial's own command line where it
    cannot be made (no space stored, a trial that launched nothing)."""
    if space is not None:
        try:
            return render_command(deployment_from_trial(trial, space)).strip()
        except InputError:
            pass
    return trial.user_attrs.get(schema.COMMAND)
