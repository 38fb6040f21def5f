"""The `tune` command line. The only layer that imports typer and rich."""

from tuner.cli.app import app

__all__ = ["app"]
