"""Take a finished trial out of the tuner: the serve command a user runs, a docker compose service, or
a Kubernetes Deployment + Service. One module per format, chosen by name in ``render.FORMATS``."""

from tuner.deploy.command import render_command, serve_command
from tuner.deploy.compose import render_compose
from tuner.deploy.deployment import Deployment, deployment_from_trial
from tuner.deploy.kubernetes import render_kubernetes
from tuner.deploy.render import FORMATS, render

__all__ = ["FORMATS", "Deployment", "deployment_from_trial", "render", "render_command",
           "render_compose", "render_kubernetes", "serve_command"]
