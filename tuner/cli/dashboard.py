"""`tune dashboard`: optuna-dashboard over the study with the tuner's trial notes."""

from __future__ import annotations

import sys
from typing import Optional

import typer
from rich.console import Console

from tuner.report.dashboard import check_address, is_loopback, resolve, serve

err = Console(stderr=True)


def dashboard(
    study: Optional[str] = typer.Argument(None, help="Study name (omit when studies/ holds one, or with --storage)."),
    storage: Optional[str] = typer.Option(None, help="SQLAlchemy URL (default: sqlite:///studies/<study>.db)."),
    host: str = typer.Option("127.0.0.1", help="Address to bind; anything but loopback exposes the study to the network."),
    port: int = typer.Option(8080, min=1, max=65535),
) -> None:
    """Open optuna-dashboard on a study, with its server logs and benchmark results as artifacts."""
    try:
        url, names = resolve(study, storage)
        if not is_loopback(host):
            err.print(f"[bold red]WARNING:[/] binding the dashboard to {host}: it has no "
                      "authentication, and anyone who can reach this port can read every trial, "
                      "server log and serve command, and delete studies. Use 127.0.0.1 and an SSH "
                      "tunnel instead.", highlight=False)
        check_address(host, port)
        err.print(f"dashboard for {', '.join(names)} on http://{host}:{port}  (Ctrl-C stops it)\n"
                  "constraints are not shown there: the [bold]feasible[/] and "
                  "[bold]failure_class[/] columns and each trial's note say what ran; "
                  "`tune best` gives the best feasible trial.", highlight=False)
        serve(url, names, host, port)
    except KeyboardInterrupt:
        sys.exit(0)


def register(app: typer.Typer) -> None:
    """Add ``tune dashboard`` to the CLI."""
    app.command("dashboard")(dashboard)
