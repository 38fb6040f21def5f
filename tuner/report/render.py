"""A study's report in one format (registry: format name -> renderer), written atomically."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import optuna

from tuner.files import write_output
from tuner.registry import Registry
from tuner.report import data as report_data
from tuner.report import markdown

FORMATS: Registry[Callable[[optuna.Study, report_data.ReportData], str]] = Registry("report format")


@FORMATS.register("html")
def _html(study: optuna.Study, tables: report_data.ReportData) -> str:
    from tuner.report import html  # plotly, only when an HTML report is asked for
    return html.render(study, tables)


@FORMATS.register("md")
def _markdown(study: optuna.Study, tables: report_data.ReportData) -> str:
    return markdown.render(tables)


def render(study: optuna.Study, fmt: str) -> str:
    renderer = FORMATS.get(fmt)  # before the tables: an unknown format fails at once
    return renderer(study, report_data.build(study))


def write_report(study: optuna.Study, out: Path, fmt: str = "html") -> Path:
    """Render and write atomically: a browser reloading or a CI upload never sees half a file."""
    return write_output(out, render(study, fmt), "report")
