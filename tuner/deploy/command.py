"""`tune deploy --format command`: the shell command a user runs, and the serve command `tune best`
and the reports print."""

from __future__ import annotations

import re
import shlex

from optuna.trial import FrozenTrial

from tuner.deploy.common import CONFIG_DIR, HF_CACHE, engine_args, hf_cache_volume
from tuner.deploy.deployment import Deployment, deployment_from_trial, docker_options
from tuner.errors import InputError
from tuner.record import schema
from tuner.space import Space

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
        lines.append(" ".join([*env, _shell([*d.command, *engine_args(d, d.host, ".")])]))
        return "\n".join(lines) + "\n"
    run = ["docker", "run", "--rm", "--name", d.name, "-p", f"{d.host}:{d.port}:{d.port}"]
    if d.gpus:
        run += ["--gpus", str(d.gpus)]
    options, _ = docker_options(d.docker_args)
    if d.shared_memory and not ({"ipc", "shm_size"} & set(options)):
        run += ["--ipc", "host"]
    if d.model_dir is not None:
        run += ["-v", f"{d.model_dir}:{d.model_dir}:ro"]
    elif hf_cache_volume(d, options.get("volume", [])):
        run += ["-v", f"huggingface:{HF_CACHE}"]
    if d.config_file is not None:
        run += ["-v", f"${{PWD}}/{d.config_file.name}:{CONFIG_DIR}/{d.config_file.name}:ro"]
    for name in d.secrets:
        run += ["-e", name]
    for key, value in sorted(d.env.items()):
        run += ["-e", f"{key}={value}"]
    run += [*d.docker_args, "--entrypoint", d.command[0], d.image, *d.command[1:],
            *engine_args(d, "0.0.0.0", CONFIG_DIR)]
    lines.append(_shell(run))
    return "\n".join(lines) + "\n"


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
