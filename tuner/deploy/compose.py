"""`tune deploy --format compose`: a docker compose service with the GPUs, mounts, health check and
secrets by reference."""

from __future__ import annotations

import shlex
from typing import Any

from tuner.deploy.common import (CONFIG_DIR, HF_CACHE, dump_yaml, engine_args, header,
                                 hf_cache_volume, needs_image)
from tuner.deploy.deployment import REF, Deployment, dns_name, docker_options


def _compose_ref(name: str, required: bool = True) -> str:
    """A reference compose fills from the shell: a required one stops `docker compose up` with a
    message when unset; an optional one (HF_TOKEN) becomes empty."""
    return "${" + name + (f":?set {name} in the environment" if required else ":-") + "}"


def _compose_literal(value: str) -> str:
    """Compose interpolates ``$``: a literal dollar is ``$$``; a ``${NAME}`` reference stays one."""
    if REF.match(value):
        return _compose_ref(REF.match(value).group(1))
    flag, eq, rest = value.partition("=")
    if eq and REF.match(rest):
        return flag.replace("$", "$$") + "=" + _compose_ref(REF.match(rest).group(1))
    return value.replace("$", "$$")


def compose_document(d: Deployment) -> tuple[dict[str, Any], list[str]]:
    """The compose file as data, and the notes for its header."""
    image = needs_image(d, "docker compose")
    options, other = docker_options(d.docker_args)
    notes = [(f"docker compose up -d; the server answers on http://{d.host}:{d.port} once "
              f"GET {d.health_path} is healthy.")]
    if d.secrets:
        notes.append("Passed from your shell by reference: " + ", ".join(d.secrets) + ".")
    if other:
        notes.append("Not carried over from the space's container args: " + shlex.join(other))
    service: dict[str, Any] = {
        "image": image,
        "entrypoint": [_compose_literal(a) for a in d.command],
        "command": [_compose_literal(a) for a in engine_args(d, "0.0.0.0", CONFIG_DIR)],
        "ports": [f"{d.host}:{d.port}:{d.port}"],
    }
    env = {k: _compose_literal(v) for k, v in sorted(d.env.items())}
    env.update({k: _compose_ref(k, required) for k, required in d.secrets.items()})
    if env:
        service["environment"] = env
    hf_volume = hf_cache_volume(d, options.get("volume", []))
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
    return header(d, notes) + dump_yaml([doc])
