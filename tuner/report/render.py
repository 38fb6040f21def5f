"""A study's report in one format (registry: format name -> renderer), written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

import optuna

from tuner.errors import InputError
from tuner.record.storage import default_url, open_storage, study_names
from tuner.report import data as report_data


def render(study: optuna.Study, fmt: Literal["html", "md"]) -> str:
    tables = report_data.build(study)
    if fmt == "md":
        from tuner.report.markdown import render as render_md
        return render_md(tables)
    from tuner.report.html import render as render_html
    return render_html(study, tables)


def write_report(study: optuna.Study, out: Path, fmt: Literal["html", "md"] = "html") -> Path:
    """Render and write atomically: a browser reloading or a CI upload never sees half a file."""
    text = render(study, fmt)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", dir=out.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out


def load_study(name: str, storage: str | None) -> optuna.Study:
    url = storage or default_url(name)
    names = study_names(url)
    if name not in names:
        raise InputError(f"no study named {name!r} in {url}; studies there: "
                         f"{', '.join(names) or '(none)'}")
    return optuna.load_study(study_name=name, storage=open_storage(url))
