"""Workload files read row by row (JSON Lines, CSV), every fault named by file and line.

A workload file is the user's own data, often exported by another tool; one bad line among
thousands must say where it is, and nothing may be sent before the whole file has been checked.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tuner.errors import BenchInputError, InputError
from tuner.files import read_text

# Longer than any model's context: a length above it is a typo, and would only exhaust memory.
MAX_TOKENS = 1 << 24


def read_file_text(path: str | os.PathLike[str], what: str) -> str:
    try:
        return read_text(Path(path).expanduser(), what)
    except InputError as exc:
        raise BenchInputError(str(exc)) from None


def jsonl_rows(path: str | os.PathLike[str], what: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for each non-blank line; a line that is not a JSON object fails."""
    text = read_file_text(path, what)
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise BenchInputError(f"{what} {os.fspath(path)} line {lineno}: not valid JSON: "
                                  f"{exc.msg} at column {exc.colno}") from None
        except RecursionError:
            raise BenchInputError(f"{what} {os.fspath(path)} line {lineno}: nests too deeply") from None
        if not isinstance(row, dict):
            raise BenchInputError(f"{what} {os.fspath(path)} line {lineno}: expected a JSON object, "
                                  f"found a JSON {type(row).__name__}")
        yield lineno, row


def csv_rows(path: str | os.PathLike[str], what: str,
             columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, str]]]:
    """``(line number, row)`` of a CSV file with a header naming at least ``columns``."""
    text = read_file_text(path, what)
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""), strict=True)
        header = reader.fieldnames or []
        missing = [c for c in columns if c not in header]
        if missing:
            raise BenchInputError(
                f"{what} {os.fspath(path)} line 1: header lacks column(s) {', '.join(missing)} "
                f"(has {', '.join(header) or 'nothing'})")
        for row in reader:
            if None in row or any(row.get(c) is None for c in columns):
                raise BenchInputError(f"{what} {os.fspath(path)} line {reader.line_num}: "
                                      f"expected {len(header)} fields")
            yield reader.line_num, row
    except csv.Error as exc:
        raise BenchInputError(f"{what} {os.fspath(path)}: not valid CSV: {exc}") from None


def field(row: dict[str, Any], key: str, where: str, *, kind: str = "int",
          required: bool = True, minimum: float | None = 1,
          maximum: float | None = MAX_TOKENS) -> Any:
    """One field of a row, converted and checked; ``where`` is "FILE line N"."""
    if key not in row or row[key] is None or row[key] == "":
        if required:
            raise BenchInputError(f"{where}: missing field {key!r}")
        return None
    value = row[key]
    if kind == "str":
        if not isinstance(value, str):
            raise BenchInputError(f"{where}: {key!r} must be a string, got {value!r:.60}")
        return value
    try:
        if isinstance(value, bool):
            raise ValueError
        number = float(value)
        if kind == "int":
            if number != int(number):
                raise ValueError
            number = int(number)
    except (TypeError, ValueError, OverflowError):
        raise BenchInputError(f"{where}: {key!r} must be a{'n integer' if kind == 'int' else ' number'},"
                              f" got {value!r:.60}") from None
    if isinstance(number, float) and not math.isfinite(number):
        raise BenchInputError(f"{where}: {key!r} must be finite, got {value!r:.60}")
    if minimum is not None and number < minimum:
        raise BenchInputError(f"{where}: {key!r} must be at least {minimum:g}, got {value!r:.60}")
    if maximum is not None and number > maximum:
        raise BenchInputError(f"{where}: {key!r} must be at most {maximum:g}, got {value!r:.60}")
    return number
