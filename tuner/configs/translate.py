"""Abstract knob values → the exact argv, environment and config file one engine gets.

The same abstract knob (``max_num_tokens``) means the same thing on every engine; the engine's YAML
says how it is spelled there. Nothing here launches anything, so ``tune plan`` and tests can show
the command a trial would run.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from tuner.configs import container
from tuner.configs.checkpoint import checkpoint_for
from tuner.configs.container import ContainerLaunch
from tuner.engines.installed import folder_launch
from tuner.engines.spec import EngineSpec, Knob
from tuner.errors import InputError
from tuner.paths import expand
from tuner.space import Container, EngineChoice, Model, Scalar


class UnsupportedValue(InputError):
    """The engine has no spelling for this abstract value (e.g. AWQ on TensorRT-LLM's flags)."""


@dataclass(frozen=True)
class LaunchPlan:
    engine: str
    argv: list[str]
    env: dict[str, str]
    model_path: str
    served_name: str
    port: int
    host: str = "127.0.0.1"
    config_file: str | None = None        # contents of the generated config, if any
    config_file_name: str | None = None   # file name to write it to, beside the trial log
    knobs: dict[str, Scalar] = field(default_factory=dict)
    # Set when the engine runs in a container: then ``argv`` is the ``docker run`` line.
    container: ContainerLaunch | None = None

    def command_line(self) -> str:
        """A copy-pasteable shell line (for humans only: launches always use the argv list)."""
        import shlex
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(self.env.items()))
        return (env + " " if env else "") + shlex.join(self.argv)


def _engine_value(knob_name: str, knob: Knob, value: Scalar, engine: str) -> Scalar:
    if knob.values is None:
        return value
    key = str(value).lower() if isinstance(value, bool) else str(value)
    if key not in knob.values:
        raise UnsupportedValue(
            f"{engine} has no setting for {knob_name}={value!r}; "
            f"supported: {', '.join(map(str, knob.values))}")
    return knob.values[key]


def _set_dotted(tree: dict, dotted: str, value: Scalar) -> None:
    parts = dotted.split(".")
    for p in parts[:-1]:
        tree = tree.setdefault(p, {})
    tree[parts[-1]] = value


def build_plan(
    spec: EngineSpec,
    choice: EngineChoice,
    model: Model,
    knobs: dict[str, Scalar],
    *,
    port: int,
    omit: frozenset[str] = frozenset(),
    host: str = "127.0.0.1",
    config_path: str | None = None,
    container_name: str | None = None,
    cidfile: str = "container.id",
    cache_reset: bool = False,
) -> LaunchPlan:
    """Translate one configuration. ``omit`` lists knobs left to the engine's own defaults.
    ``cache_reset``: the server will be asked to empty its prefix cache between benchmark runs,
    so the launch gets what the engine needs for that endpoint (nothing in a deployment).

    With ``choice.container`` the engine listens on 0.0.0.0 inside the container and the argv is
    the ``docker run`` line (``container_name`` and ``cidfile`` identify the container; ``host`` is
    where the client reaches the mapped port).
    """
    model_path = checkpoint_for(spec, model, knobs.get("quantization"))
    folder = folder_launch(spec, Path(expand(choice.install))) if choice.install else None
    command = list(choice.command or (folder.command if folder else spec.command))
    command[0] = expand(command[0])
    argv = command[:]
    if spec.model_arg:
        argv += [spec.model_arg, model_path]
    else:
        argv.append(model_path)
    argv += [spec.host_flag, "0.0.0.0" if choice.container else host, spec.port_flag, str(port)]
    served = model.name()
    if spec.served_name_flag:
        argv += [spec.served_name_flag, served]

    config_tree: dict = {}
    for name, value in knobs.items():
        if name in omit:
            continue
        knob = spec.knobs.get(name)
        if knob is None:
            raise InputError(f"engine {spec.name!r} has no knob {name!r}")
        if name == "quantization" and value in (None, "none"):
            continue
        if name == "quantization" and knob.prefer_checkpoint and value in model.variants:
            continue  # the checkpoint carries its quantization
        if knob.type == "bool":
            flags = knob.when_true if value else knob.when_false
            if flags is None and knob.config_key is None:
                raise UnsupportedValue(f"{spec.name} cannot set {name}={value!r}")
            if knob.config_key is not None:
                _set_dotted(config_tree, knob.config_key, _engine_value(name, knob, value, spec.name))
            else:
                argv += flags
            continue
        engine_value = _engine_value(name, knob, value, spec.name)
        if knob.config_key is not None:
            _set_dotted(config_tree, knob.config_key, engine_value)
        elif engine_value is not None:
            argv += [knob.flag, str(engine_value)]
    if folder is not None:
        argv += folder.args
    argv += [expand(a) for a in choice.fixed_args]

    config_text = config_name = None
    if config_tree:
        if spec.config_file is None:
            raise InputError(f"engine {spec.name!r} has config_key knobs but no config_file section")
        config_name = f"{spec.name}-config.{spec.config_file.format}"
        config_text = (yaml.safe_dump(config_tree, sort_keys=False)
                       if spec.config_file.format == "yaml" else json.dumps(config_tree, indent=2))
        argv += [spec.config_file.flag, config_path or config_name]
    env = {**spec.env, **(folder.env if folder else {}), **{k: expand(v) for k, v in choice.env.items()}}
    if cache_reset and spec.prefix_cache_reset is not None:
        env.update(spec.prefix_cache_reset.env)
    launch = None
    if choice.container is not None:
        launch = ContainerLaunch(choice.container.runtime, choice.container.image,
                                 container_name or container.unique_name(spec.name), cidfile)
        # Host paths the tuner itself puts on the command line: the model (unless it is a hub id)
        # and the generated config file (written beside the trial log before the launch).
        mounts = [model_path] if os.path.isabs(model_path) and os.path.exists(model_path) else []
        if config_text is not None and config_path:
            mounts.append(config_path)
        argv, env = _in_container(choice.container, launch, argv, env, port, mounts)
    return LaunchPlan(engine=spec.name, argv=argv, env=env, model_path=model_path,
                      served_name=served, port=port, host=host, config_file=config_text,
                      config_file_name=config_name, knobs=dict(knobs), container=launch)


def _in_container(c: Container, launch: ContainerLaunch, argv: list[str], env: dict[str, str],
                  port: int, mounts: list[str]) -> tuple[list[str], dict[str, str]]:
    """The ``docker run`` line for the engine's argv, and the environment of that client."""
    visible = None
    if c.gpus is not None:  # the devices the engine would see on the host; inside, 0 to n-1
        env = dict(env)
        visible = env.pop("CUDA_VISIBLE_DEVICES", os.environ.get("CUDA_VISIBLE_DEVICES"))
    run = container.run_argv(c, argv, name=launch.name, cidfile=launch.cidfile, port=port,
                             env_names=sorted(env), mounts=mounts, visible_devices=visible)
    return run, env
