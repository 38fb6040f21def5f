"""Keep credentials out of everything the tuner stores: argv, env, logs, user attrs, artifacts."""

from __future__ import annotations

import os
import re

_SECRET_FLAGS = {"--api-key", "--api_key", "--hf-token", "--hf_token", "--token", "--password"}
_ENV_FLAGS = {"-e", "--env"}  # docker run -e NAME=VALUE
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL)", re.IGNORECASE)
# `--api-key ${MY_KEY}` in a space file is a reference, not a secret: it is kept, so a resumed
# study can expand it again from its environment.
_ENV_REFERENCE = re.compile(r"^\$\{?[A-Za-z_][A-Za-z0-9_]*\}?$")
MASK = "***"


def is_secret_name(name: str) -> bool:
    """Does an environment variable of this name hold a credential (its value is never written)?"""
    return bool(_SECRET_ENV.search(name))


def _mask(value: str) -> str:
    return value if _ENV_REFERENCE.match(value) else MASK


def _secrets_in(argv: list[str]) -> dict[int, tuple[str, str]]:
    """Where ``argv`` holds a secret: index -> (the text kept before it, the secret). Secret flags
    (``--api-key X``), and ``docker run -e NAME=VALUE`` when NAME looks like a credential."""
    found = {}
    for i, arg in enumerate(argv):
        flag, eq, value = arg.partition("=")
        if eq:
            at, kept, text = i, flag + "=", value
        elif i + 1 < len(argv):
            at, kept, text = i + 1, "", argv[i + 1]
        else:
            continue
        if flag in _SECRET_FLAGS:
            found[at] = (kept, text)
        elif flag in _ENV_FLAGS:
            name, assigned, secret = text.partition("=")
            if assigned and secret and _SECRET_ENV.search(name):
                found[at] = (f"{kept}{name}=", secret)
    return found


def redact_argv(argv: list[str]) -> list[str]:
    found = _secrets_in(argv)
    return [found[i][0] + _mask(found[i][1]) if i in found else arg for i, arg in enumerate(argv)]


def redact_env(env: dict[str, str]) -> dict[str, str]:
    return {k: (_mask(v) if _SECRET_ENV.search(k) and v else v) for k, v in env.items()}


def redact_space(space: dict) -> dict:
    """A space as stored in a study: literal secrets in engines' args and env are masked."""
    engines = {}
    for name, engine in space.get("engines", {}).items():
        engines[name] = {**engine, "fixed_args": redact_argv(engine.get("fixed_args") or []),
                         "env": redact_env(engine.get("env") or {})}
        if engine.get("container"):
            c = engine["container"]
            engines[name]["container"] = {**c, "args": redact_argv(c.get("args") or [])}
    return {**space, "engines": engines}


def secret_values(argv: list[str], env: dict[str, str]) -> list[str]:
    """Every secret in play, so free text (logs) can be scrubbed of them too."""
    values = [v for k, v in {**os.environ, **env}.items() if _SECRET_ENV.search(k) and len(v) >= 6]
    values += [v for _, v in _secrets_in(argv).values() if len(v) >= 4]
    return sorted(set(values), key=len, reverse=True)


def redact_text(text: str, secrets: list[str]) -> str:
    for s in secrets:
        text = text.replace(s, MASK)
    return text
