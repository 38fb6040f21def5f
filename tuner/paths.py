"""Where things live: the bundled data, the user's own spaces, the cache of engine venvs and models,
and study files.

The bundled spaces and the engine specs (with GPU profiles, model shapes and runtime errors) live at a
checkout's top level, ``search_spaces/`` and ``engines/``, where a user adding one looks for them. The
wheel carries the same folders as ``tuner/_data/`` (pyproject's force-include), read through
``importlib.resources``; a checkout or an editable install has no ``_data`` and reads the top level.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

PACKAGE_ROOT = Path(str(files("tuner")))
REPO_ROOT = PACKAGE_ROOT.parent  # a checkout's root; in an installed wheel, site-packages
_SHIPPED = PACKAGE_ROOT / "_data"
DATA_ROOT = _SHIPPED if _SHIPPED.is_dir() else REPO_ROOT
ENGINES_DIR = DATA_ROOT / "engines"
# `tune engine kit`'s default host: an H200 host's CUDA image, as `pip list --format=freeze` printed it
HOST_PACKAGES_FILE = ENGINES_DIR / "hosts" / "h200-cuda-image.txt"
SPACES_DIR = DATA_ROOT / "search_spaces"
SAMPLES_DIR = PACKAGE_ROOT / "bench" / "samples"


def user_spaces_dir() -> Path:
    """The user's own spaces, found by name before the bundled ones."""
    return Path(os.environ.get("TUNER_SPACES_DIR", Path.cwd() / "search_spaces")).expanduser()


def cache_dir() -> Path:
    """Engine venvs and generated models: outside the checkout so fresh clones and CI reuse them."""
    return Path(os.environ.get("TUNER_CACHE", Path.home() / ".cache" / "tuner")).expanduser()


def data_dir() -> Path:
    """Datasets too large for the repo (ShareGPT): spaces name them as ``${TUNER_DATA}/...``."""
    return Path(os.environ.get("TUNER_DATA", cache_dir() / "data")).expanduser()


def studies_dir() -> Path:
    return Path(os.environ.get("TUNER_STUDIES_DIR", Path.cwd() / "studies")).expanduser()


_VARS = ("TUNER_CACHE", "TUNER_DATA", "TUNER_SAMPLES")


def expand(value: str) -> str:
    """Expand ``~``, ``$VAR``, ``${TUNER_CACHE}``, ``${TUNER_DATA}`` (both defaulted) and
    ``${TUNER_SAMPLES}`` (the small datasets shipped in the package) in a path from a YAML file."""
    env = dict(os.environ)
    env.setdefault("TUNER_CACHE", str(cache_dir()))
    env.setdefault("TUNER_DATA", str(data_dir()))
    env["TUNER_SAMPLES"] = str(SAMPLES_DIR)
    return os.path.expanduser(os.path.expandvars(_subst(value, env)))


def _subst(value: str, env: dict[str, str]) -> str:
    for key in _VARS:
        value = value.replace("${" + key + "}", env[key]).replace("$" + key, env[key])
    return value
