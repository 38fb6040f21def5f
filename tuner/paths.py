"""Where things live: the repo's data folders, the cache of engine venvs and models, study files."""

from __future__ import annotations

import os
from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
REPO_ROOT = PACKAGE_ROOT.parent
ENGINES_DIR = REPO_ROOT / "engines"
SPACES_DIR = REPO_ROOT / "search_spaces"


def cache_dir() -> Path:
    """Engine venvs and generated models: outside the checkout so fresh clones and CI reuse them."""
    return Path(os.environ.get("TUNER_CACHE", Path.home() / ".cache" / "tuner")).expanduser()


def data_dir() -> Path:
    """Datasets too large for the repo (ShareGPT): spaces name them as ``${TUNER_DATA}/...``."""
    return Path(os.environ.get("TUNER_DATA", cache_dir() / "data")).expanduser()


def studies_dir() -> Path:
    return Path(os.environ.get("TUNER_STUDIES_DIR", Path.cwd() / "studies")).expanduser()


def expand(value: str) -> str:
    """Expand ``~``, ``$VAR``, ``${TUNER_CACHE}``, ``${TUNER_DATA}`` (both defaulted) and
    ``${TUNER_REPO}`` (this checkout, for data shipped with it) in a path from a YAML file."""
    env = dict(os.environ)
    env.setdefault("TUNER_CACHE", str(cache_dir()))
    env.setdefault("TUNER_DATA", str(data_dir()))
    env["TUNER_REPO"] = str(REPO_ROOT)
    return os.path.expanduser(os.path.expandvars(_subst(value, env)))


def _subst(value: str, env: dict[str, str]) -> str:
    for key in ("TUNER_CACHE", "TUNER_DATA", "TUNER_REPO"):
        value = value.replace("${" + key + "}", env[key]).replace("$" + key, env[key])
    return value
