"""Where and how `tune bench` saves a result: the file name vLLM's client would pick, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tuner.bench.runner import BenchResult


def default_result_filename(result: BenchResult) -> str:
    """vLLM's name: ``{backend}-{rate}qps[-concurrency{C}]-{model}-{date}.json``."""
    c = result.config
    conc = f"-concurrency{c.max_concurrency}" if c.max_concurrency is not None else ""
    return f"{c.backend}-{c.request_rate}qps{conc}-{c.model.split('/')[-1]}-{result.date}.json"


def write_json_atomic(path: Path, doc: dict[str, Any]) -> None:
    """Write via a temporary file in the same folder and rename: readers never see half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "x", encoding="utf-8") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
