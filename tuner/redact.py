"""Keep credentials out of everything the tuner stores: argv, env, logs, user attrs, artifacts."""

from __future__ import annotations

import os
import re

_SECRET_FLAGS = {"--api-key", "--api_key", "--hf-token", "--hf_token", "--token", "--password"}
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# `--api-key ${MY_KEY}` in a space file is a reference, not a secret: it is kept, so a resumed
# study can expand it again from its environment.
_ENV_REFERENCE = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")
MASK = "***"


def _mask(value: str) -> str:
    return value if _ENV_REFERENCE.match(value) else MASK


def redact_argv(argv: list[str]) -> list[str]:
    out, hide_next = [], False
    for arg in argv:
        if hide_next:
            out.append(_mask(arg))
            hide_next = False
            continue
        flag, eq, value = arg.partition("=")
        if flag in _SECRET_FLAGS:
            if eq:
                out.append(f"{flag}={_mask(value)}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(arg)
    return out


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (_mask(v) if _SECRET_ENV.search(k) and v else v) for k, v in env.items()}


def redact_space(space: dict) -> dict:
    """A space as stored in a study: literal secrets in engines' args and env are masked."""
    engines = {}
    for name, engine in space.get("engines", {}).items():
        engines[name] = {**engine, "fixed_args": redact_argv(engine.get("fixed_args") or []),
                         "env": redact_env(engine.get("env") or {})}
    return {**space, "engines": engines}


def secret_values(argv: list[str], env: dict[str, str]) -> list[str]:
    """Every secret in play, so free text (logs) can be scrubbed of them too."""
    values = [v for k, v in {**os.environ, **env}.items() if _SECRET_ENV.search(k) and len(v) >= 6]
    for i, arg in enumerate(argv):
        flag, eq, val = arg.partition("=")
        if flag in _SECRET_FLAGS:
            v = val if eq else (argv[i + 1] if i + 1 < len(argv) else "")
            if len(v) >= 4:
                values.append(v)
    return sorted(set(values), key=len, reverse=True)


def redact_text(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, MASK)
    return text
