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

from optuna.trial import FrozenTrial

from tuner.configs.translate import build_plan
from tuner.engines.spec import EngineSpec, load_engine
from tuner.errors import InputError
from tuner.record import schema
from tuner.redact import MASK, is_secret_name
from tuner.space import Space

REF = re.compile(r"^\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?$")  # a ``${NAME}`` (or ``$NAME``) reference
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
        if is_secret_name(key) or value == MASK or REF.match(value):
            secrets[key] = True
        else:
            env[key] = value
    options, docker_args = docker_options(docker_args, keep=("env",))
    for item in options.get("env", []):  # `-e NAME` passes the value through: a reference
        key, eq, value = item.partition("=")
        if eq and not (is_secret_name(key) or value == MASK or REF.match(value)):
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
    if eq and flag.startswith("-") and (value == MASK or REF.match(value)):
        ref = REF.match(value)
        name = ref.group(1) if ref else _env_name(flag)
        secrets[name] = True
        return f"{flag}=${{{name}}}"
    if arg == MASK or REF.match(arg):
        ref = REF.match(arg)
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


def docker_options(args: list[str], keep: tuple[str, ...] = ()
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
