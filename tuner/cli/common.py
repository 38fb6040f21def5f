"""What every `tune` command shares: the consoles, the one way an input error ends a command
(``error: <message>``, exit 2, no traceback), and the default storage of a study."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from tuner.errors import InputError
from tuner.record.storage import default_url
from tuner.study.lifecycle import StudyHandle, load

console = Console(width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, soft_wrap=True)


def fail(message: str, code: int = 2) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def url(storage: str | None, study: str) -> str:
    """The study's storage: the one given, or its SQLite file under ./studies."""
    return storage or default_url(study)


def study_and_trial(spec: str, storage: str | None) -> tuple[StudyHandle, int | None]:
    """A config named on the command line: ``STUDY`` or ``STUDY:TRIAL``."""
    name, sep, number = spec.rpartition(":")
    if not sep:
        name, number = spec, ""
    elif not number.isdigit():
        raise InputError(f"{spec!r}: name a config as STUDY or STUDY:TRIAL (a trial number)")
    return load(name, url(storage, name)), int(number) if number else None


def _input_errors_exit_2(command: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(command)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return command(*args, **kwargs)
        except InputError as exc:
            fail(str(exc))
    return run


class App(typer.Typer):
    """A Typer app whose every command turns an ``InputError`` into ``error: ...`` and exit 2."""

    def command(self, *args: Any, **kwargs: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        register = super().command(*args, **kwargs)
        return lambda f: register(_input_errors_exit_2(f))
