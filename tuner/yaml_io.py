"""Load YAML into pydantic models with errors that name the file, the line and the key.

Users edit space and engine files by hand; "validation error" alone is not actionable, so every
problem is reported as ``file:line: key.path: what is wrong``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from tuner.errors import InputError
from tuner.files import read_text

M = TypeVar("M", bound=BaseModel)


class _LineLoader(yaml.SafeLoader):
    """SafeLoader that remembers the line of each mapping key, so errors can point at it."""


def _construct_mapping(loader: _LineLoader, node: yaml.MappingNode) -> dict:
    mapping = {}
    lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, (dict, list)):
            # a flow mapping or list as a key ("{{}}: 1") is valid YAML but no key of ours
            raise yaml.constructor.ConstructorError(
                None, None, f"a key must be a name, not {type(key).__name__} {key!r}", key_node.start_mark)
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark)
        mapping[key] = loader.construct_object(value_node, deep=True)
        lines[key] = key_node.start_mark.line + 1
    loader.key_lines[id(mapping)] = (node.start_mark.line + 1, lines)
    return mapping


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path, what: str = "YAML file") -> tuple[Any, dict]:
    """Parse ``path`` safely; returns the data and a key-line index for error messages.

    ``what`` names the file in errors about its bytes ("space file ...: not UTF-8 text")."""
    text = read_text(path, what)
    loader = None
    try:
        loader = _LineLoader(text)  # the reader already rejects control characters here
        loader.key_lines = {}
        data = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        problem = getattr(exc, "problem", None) or str(exc)
        ctx, ctx_mark = getattr(exc, "context", None), getattr(exc, "context_mark", None)
        if ctx and ctx_mark is not None and mark is not None and ctx_mark.line != mark.line:
            problem += f" ({ctx} at line {ctx_mark.line + 1})"
        raise InputError(f"{where}: invalid YAML: {problem}") from None
    except RecursionError:  # the parser recurses per nesting level: "[[[[..." exhausts the stack
        raise InputError(f"{path}: invalid YAML: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()
    return data, loader.key_lines


def _line_of(data: Any, loc: tuple, key_lines: dict) -> int | None:
    line = None
    node = data
    for part in loc:
        if isinstance(node, dict):
            entry = key_lines.get(id(node))
            if entry and part in entry[1]:
                line = entry[1][part]
            elif entry:
                line = entry[0]
            node = node.get(part)
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            break
    return line


def format_validation_error(exc: ValidationError, source: str, data: Any, key_lines: dict) -> str:
    problems = []
    for err in exc.errors():
        loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith("function-")))
        line = _line_of(data, loc, key_lines)
        where = f"{source}:{line}" if line else source
        key = ".".join(str(p) for p in loc) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        problems.append(f"{where}: {key}: {msg}")
    return "\n".join(problems)


def parse_model(model: type[M], data: Any, source: str, key_lines: dict | None = None) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InputError(format_validation_error(exc, source, data, key_lines or {})) from None


def load_model(model: type[M], path: Path, what: str = "YAML file") -> M:
    data, key_lines = load_yaml(path, what)
    if not isinstance(data, dict):
        raise InputError(f"{path}: expected a mapping at the top level, got {type(data).__name__}")
    return parse_model(model, data, str(path), key_lines)
