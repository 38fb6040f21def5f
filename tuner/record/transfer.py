"""Move a study between machines: one archive with the trials, attrs, artifacts and trial logs.

Optuna's ``copy_study`` moves trials and artifact metadata but not the artifact files; the archive
carries both, plus a manifest with the hardware fingerprint so the importing side can tell whether
its own measurements may be mixed in (``tune resume`` checks it).
"""

from __future__ import annotations

import json
import shutil
import tarfile
import tempfile
from datetime import datetime, timezone
from pathlib import Path

import optuna

from tuner import __version__
from tuner.errors import InputError
from tuner.record import schema
from tuner.record.storage import data_dir, open_storage, require_study, study_names

FORMAT = 1


def export_study(name: str, url: str, out: Path) -> Path:
    """Write ``out`` (a .tar.gz) atomically: a partial archive never takes its place."""
    require_study(name, url)
    out = out.expanduser().resolve()
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        optuna.copy_study(from_study_name=name, from_storage=open_storage(url),
                          to_storage=f"sqlite:///{tmp_path / 'study.db'}")
        study = optuna.load_study(study_name=name, storage=open_storage(url))
        manifest = {"format": FORMAT, "study": name, "tuner_version": __version__,
                    "exported_at": datetime.now(timezone.utc).isoformat(),
                    "trials": len(study.trials),
                    "fingerprint": study.user_attrs.get(schema.FINGERPRINT)}
        (tmp_path / "manifest.json").write_text(json.dumps(manifest, indent=2))
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w:gz") as tar:
            tar.add(tmp_path / "manifest.json", "manifest.json")
            tar.add(tmp_path / "study.db", "study.db")
            files = data_dir(url, name)
            if files.exists():
                tar.add(files, "files")
        partial.replace(out)
    return out


def import_study(archive: Path, url_for: callable, *, name: str | None = None) -> tuple[str, str]:
    """Import into the storage ``url_for(study_name)``; returns (study name, storage URL).

    Refuses to overwrite an existing study of the same name.
    """
    archive = archive.expanduser()
    if not archive.is_file():
        raise InputError(f"{archive}: no such archive")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        try:
            with tarfile.open(archive, "r:gz") as tar:
                tar.extractall(tmp_path, filter="data")
            manifest = json.loads((tmp_path / "manifest.json").read_text())
        except (tarfile.TarError, OSError, ValueError, KeyError) as exc:
            raise InputError(f"{archive}: not a tune export archive ({exc})") from None
        if manifest.get("format") != FORMAT or not (tmp_path / "study.db").exists():
            raise InputError(f"{archive}: unsupported export format {manifest.get('format')!r}")
        source = manifest["study"]
        target = name or source
        url = url_for(target)
        if target in study_names(url):
            raise InputError(f"study {target!r} already exists in {url}; import with --name NEW")
        optuna.copy_study(from_study_name=source, from_storage=f"sqlite:///{tmp_path / 'study.db'}",
                          to_storage=open_storage(url, create=True), to_study_name=target)
        if (tmp_path / "files").exists():
            shutil.copytree(tmp_path / "files", data_dir(url, target), dirs_exist_ok=True)
    return target, url
