"""The `tune` command: one Typer app with each verb group's module registering its commands."""

from __future__ import annotations

import optuna

from tuner.cli import (
    bench,
    compare,
    dashboard,
    engine,
    evaluate,
    judge,
    model,
    ops,
    plan,
    report,
    results,
    study,
    transfer,
)
from tuner.cli.common import App

optuna.logging.set_verbosity(optuna.logging.ERROR)  # the terminal shows progress, not Optuna's log
app = App(add_completion=False, no_args_is_help=True,
          help="Find the fastest way to serve an LLM on given hardware.")

for _group in (study, judge, results, transfer, model, bench, plan, dashboard, engine, evaluate, report,
               compare, ops):
    _group.register(app)
