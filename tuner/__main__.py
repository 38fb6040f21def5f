"""``python -m tuner``: the `tune` command."""

from tuner.cli import app

app(prog_name="tune")
