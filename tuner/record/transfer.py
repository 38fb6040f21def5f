"""Move a study between machines: one archive with the trials, attrs, artifacts and trial logs.

Optuna's ``copy_study`` moves trials and artifact metadata but not the artifact files; the archive
carries both, plus a manifest with the hardware fingerprint so the importing side can tell whether
its own measurements may be mixed in (``tune resume`` checks it).
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import zlib
from datetime import datetime, timezone
from pathlib import Path

import optuna

from tuner import __version__
from tuner.errors import InputError
from tuner.files import check_output_path, check_readable, read_text
from tuner.record import schema
from tuner.record.storage import check_study_name, data_dir, open_storage, require_study, study_names

FORMAT = 1


def export_study(name: str, url: str, out: Path, *, force: bool = False) -> Path:
    """Write ``out`` (a .tar.gz) atomically: a partial archive never takes its place, and an
    existing file is replaced only with ``force``."""
    require_study(name, url)
    out = out.expanduser().resolve()
    check_output_path(out, "archive")
    if out.exists() and not force:
        raise InputError(f"archive {out}: exists; pass --force to replace it")
    partial = out.with_name(out.name + ".partial")
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
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            with tarfile.open(partial, "w:gz") as tar:
                tar.add(tmp_path / "manifest.json", "manifest.json")
                tar.add(tmp_path / "study.db", "study.db")
                files = data_dir(url, name)
                if files.exists():
                    tar.add(files, "files")
            partial.replace(out)
        except OSError as exc:
            raise InputError(f"archive {out}: cannot write: {exc.strerror or exc}") from None
        finally:
            if partial.exists():
                partial.unlink()
    return out


def import_study(archive: Path, url_for: callable, *, name: str | None = None) -> tuple[str, str]:
    """Import into the storage ``url_for(study_name)``; returns (study name, storage URL).

    Refuses to overwrite an existing study of the same name. A trial that was RUNNING when the
    study was exported (a snapshot of a live study) can never finish here, since its worker writes
    to the other storage: it arrives as an interrupted FAIL, which `tune resume` re-queues.
    """
    archive = check_readable(archive.expanduser(), "export archive")
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        source = _unpack(archive, tmp_path)
        target = check_study_name(name or source)
        url = url_for(target)
        if target in study_names(url):
            raise InputError(f"study {target!r} already exists in {url}; import with --name NEW")
        files = data_dir(url, target)
        if files.exists() and not files.is_dir():
            raise InputError(f"study {target!r}: {files} is a file, where the study's files go; "
                             "move it or import with --name NEW")
        storage = open_storage(url, create=True)
        try:
            optuna.copy_study(from_study_name=source, from_storage=_source_url(tmp_path),
                              to_storage=storage, to_study_name=target)
            _interrupt_running(optuna.load_study(study_name=target, storage=storage))
            if (tmp_path / "files").exists():
                shutil.copytree(tmp_path / "files", files, dirs_exist_ok=True)
        except BaseException as exc:
            # A study without its artifacts and logs would be refused on a second import
            # ("already exists"): take it out again, so the import can simply be repeated.
            if target in study_names(url):
                optuna.delete_study(study_name=target, storage=storage)
            if isinstance(exc, OSError):
                raise InputError(f"study {target!r}: cannot write its files to {files}: "
                                 f"{exc.strerror or exc}; nothing was imported") from None
            raise
    return target, url


def _interrupt_running(study: optuna.Study) -> None:
    storage = study._storage
    for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
        storage.set_trial_user_attr(t._trial_id, schema.INTERRUPTED, True)
        storage.set_trial_state_values(t._trial_id, optuna.trial.TrialState.FAIL)


def _source_url(root: Path) -> str:
    return f"sqlite:///{root / 'study.db'}"


def _unpack(archive: Path, root: Path) -> str:
    """Extract ``archive`` into ``root`` and check it is one of ours; returns the study's name.

    A file that is not gzip, a truncated download, a tarball of something else, a manifest that is
    not UTF-8 JSON, a study.db that is not SQLite: each is one InputError naming the archive."""
    def refuse(why: str) -> InputError:
        return InputError(f"export archive {archive}: not a tune export archive ({why})")

    try:
        with tarfile.open(archive, "r:gz") as tar:
            tar.extractall(root, filter="data")
    except (tarfile.TarError, OSError, EOFError, zlib.error) as exc:
        raise refuse(str(exc) or type(exc).__name__) from None
    try:
        manifest = json.loads(read_text(root / "manifest.json", "member"))
    except InputError as exc:
        raise refuse(str(exc).replace(f"{root}{os.sep}", "")) from None
    except (ValueError, RecursionError) as exc:
        raise refuse(f"manifest.json is not JSON: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise InputError(f"export archive {archive}: unsupported export format {found!r}")
    source = manifest.get("study")
    if not isinstance(source, str) or not (root / "study.db").is_file():
        raise refuse("no study name in manifest.json, or no study.db")
    try:
        names = study_names(_source_url(root))
    except InputError as exc:
        raise refuse(f"study.db: {str(exc).split(': ', 1)[-1].splitlines()[0]}") from None
    if source not in names:
        raise refuse(f"study.db holds no study {source!r}")
    return source
