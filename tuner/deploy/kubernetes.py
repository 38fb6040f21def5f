"""`tune deploy --format kubernetes`: a Deployment and a Service (and a ConfigMap for an engine config
file), secrets from a Secret by reference."""

from __future__ import annotations

import os
import re
from typing import Any

from tuner.deploy.common import (CONFIG_DIR, HF_CACHE, dump_yaml, engine_args, header,
                                 hf_cache_volume, needs_image)
from tuner.deploy.deployment import REF, Deployment, docker_options


def _size_to_k8s(size: str) -> str:
    """docker's ``16g`` -> Kubernetes' ``16Gi``."""
    m = re.fullmatch(r"(\d+)([bkmgBKMG]?)[bB]?", size.strip())
    if not m:
        return size
    unit = {"": "", "b": "", "k": "Ki", "m": "Mi", "g": "Gi"}[m.group(2).lower()]
    return m.group(1) + unit


def _k8s_arg(value: str) -> str:
    """Kubernetes expands ``$(NAME)`` from the container's env in command and args; ``$$`` is a
    literal dollar."""
    flag, eq, rest = value.partition("=")
    if REF.match(value):
        return "$(" + REF.match(value).group(1) + ")"
    if eq and REF.match(rest):
        return flag.replace("$(", "$$(") + "=$(" + REF.match(rest).group(1) + ")"
    return value.replace("$(", "$$(")


def kubernetes_documents(d: Deployment) -> tuple[list[dict[str, Any]], list[str]]:
    """The Deployment, Service (and ConfigMap) as data, and the notes for the header."""
    image = needs_image(d, "Kubernetes")
    options, other = docker_options(d.docker_args)
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
    if hf_cache_volume(d, options.get("volume", [])):
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
        "args": [_k8s_arg(a) for a in engine_args(d, "0.0.0.0", CONFIG_DIR)],
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
    return header(d, notes) + dump_yaml(documents)
