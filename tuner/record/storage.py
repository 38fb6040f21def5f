"""Where a study is stored: the Optuna storage URL, its artifact store and its per-trial log folders.

SQLite under ``studies/`` by default; any SQLAlchemy URL (PostgreSQL for several workers) works.
Artifacts and logs sit beside an SQLite file, or under ``studies/`` for server databases.
"""

from __future__ import annotations

import os
import re
import time
import warnings
from pathlib import Path

import optuna
from optuna.artifacts import FileSystemArtifactStore
from optuna.storages.journal import JournalFileBackend
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from tuner.errors import InputError
from tuner.paths import studies_dir


def private_dir(path: Path) -> Path:
    """Study files hold commands, logs and environment: readable by their owner only."""
    for p in reversed([path, *path.parents]):
        if not p.exists():
            p.mkdir(mode=0o700)  # parents too: mkdir(parents=True) would leave them world-readable
    return path


# A study's name is also a file name (its SQLite database, and its files folder beside any
# storage), so it is one path component; a space's name, its default study name, follows it too.
STUDY_NAME = r"^[A-Za-z0-9][A-Za-z0-9._+-]*$"  # "+": a new-hardware study's device key


def check_study_name(name: str) -> str:
    """``name`` if it can name a study's files; otherwise an InputError naming it."""
    if not re.fullmatch(STUDY_NAME, name):
        raise InputError(f"study name {name!r}: use letters, digits, '.', '_', '+' and '-', starting with "
                         "a letter or digit (it names the study's files)")
    return name


def default_url(study_name: str) -> str:
    return f"sqlite:///{studies_dir() / (check_study_name(study_name) + '.db')}"


def _parse(url: str):
    try:
        return make_url(url)
    except ArgumentError:
        raise InputError(f"--storage {url!r} is not a database URL (e.g. sqlite:///studies/x.db "
                         "or postgresql://user@host/db)") from None


def journal_path(url: str) -> Path | None:
    """``journal:///abs/path.journal`` or a bare ``*.journal`` path: Optuna's append-only file log,
    safe for several workers on one machine or NFS, where SQLite is not."""
    if url.startswith("journal://"):
        return Path(url.removeprefix("journal://"))
    if url.endswith(".journal") and "://" not in url:
        return Path(url).expanduser().resolve()
    return None


def sqlite_path(url: str) -> Path | None:
    if journal_path(url):
        return None
    parsed = _parse(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database or parsed.database == ":memory:":
        return None
    return Path(parsed.database)


def open_storage(url: str, *, create: bool = False) -> optuna.storages.BaseStorage:
    """Open the storage; a bad URL is an input error naming it.

    Only ``create=True`` may make a new SQLite file, so reading commands given a wrong name leave
    nothing behind.
    """
    journal = journal_path(url)
    if journal is not None:
        if not create and not journal.exists():
            raise InputError(f"no study journal at {journal}")
        try:
            private_dir(journal.parent)
            return optuna.storages.JournalStorage(JournalFileBackend(str(journal)))
        except OSError as exc:
            raise InputError(f"--storage {url!r}: cannot create {journal}: {exc.strerror or exc}") from None
    parsed = _parse(url)
    engine_kwargs = {}
    db = sqlite_path(url)
    if db is not None:
        if not create and not db.exists():
            raise InputError(f"no study database at {db}")
        # Readers such as the dashboard must not make the writer fail with "database is locked".
        engine_kwargs = {"connect_args": {"timeout": 30}}
        try:
            private_dir(db.parent)
            if create and not db.exists():
                _create_sqlite(db, engine_kwargs)
        except OSError as exc:
            raise InputError(f"--storage {url!r}: cannot create {db}: {exc.strerror or exc}") from None
    elif parsed.get_backend_name() == "sqlite":
        raise InputError(f"--storage {url!r}: an in-memory SQLite study cannot be resumed; "
                         "give a file path")
    heartbeat = {}
    if db is None:
        # Server databases serve several workers: a dead worker's trial goes stale and is failed,
        # then re-queued by tuner.study.recover.
        heartbeat = {"heartbeat_interval": 30, "grace_period": 120}
    for attempt in range(5):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                return optuna.storages.RDBStorage(url, engine_kwargs=engine_kwargs, **heartbeat)
        except Exception as exc:
            # Workers starting together on an empty database race to create Optuna's schema;
            # the losers see the winner's tables or version row and find the schema on a second
            # look.
            if attempt < 4 and any(text in str(exc) for text in _SCHEMA_RACE):
                time.sleep(0.5 + attempt)
                continue
            raise InputError(f"cannot open storage {url!r}: {exc}") from None


_SCHEMA_RACE = ("already exists", "UNIQUE constraint failed: alembic_version",
                "duplicate key value")


def _create_sqlite(db: Path, engine_kwargs: dict) -> None:
    """Make a new study file with Optuna's schema already in it, in one step.

    A reader that opens the file (a dashboard, a status poll) while the writer is still creating
    the schema would create it too, and one of them fails on Optuna's version row. Building the
    schema in a private temporary file and linking it into place means the name only ever shows a
    complete database; a concurrent creator's link loses cleanly and both use the winner's file.
    """
    tmp = db.with_name(f".{db.name}.{os.getpid()}.creating")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            storage = optuna.storages.RDBStorage(f"sqlite:///{tmp}", engine_kwargs=engine_kwargs)
        storage.engine.dispose()
        try:
            os.link(tmp, db)
        except FileExistsError:
            pass
    finally:
        tmp.unlink(missing_ok=True)


def study_names(url: str) -> list[str]:
    """Studies in a storage; a file that does not exist yet simply has none."""
    path = sqlite_path(url) or journal_path(url)
    if path is not None and not path.exists():
        return []
    return [s.study_name for s in optuna.get_all_study_summaries(open_storage(url))]


def data_dir(url: str, study_name: str) -> Path:
    """The folder holding this study's artifacts and trial logs."""
    path = sqlite_path(url) or journal_path(url)
    base = path.parent if path is not None else studies_dir()
    return (base / f"{check_study_name(study_name)}-files").resolve()


def artifact_store(url: str, study_name: str) -> FileSystemArtifactStore:
    path = data_dir(url, study_name) / "artifacts"
    private_dir(path)
    return FileSystemArtifactStore(str(path))


def trial_dir(url: str, study_name: str, number: int) -> Path:
    return data_dir(url, study_name) / "trials" / f"trial-{number:04d}"


def require_study(name: str, url: str) -> list[str]:
    """The studies in ``url``; an input error naming them when ``name`` is not one."""
    names = study_names(url)
    if name not in names:
        raise InputError(f"no study named {name!r} in {url}; studies there: "
                         f"{', '.join(names) or '(none)'}")
    return names


def load_optuna_study(name: str, url: str) -> optuna.Study:
    """A stored study by name (read it: the tuner's own handle is ``tuner.study.load``)."""
    require_study(name, url)
    return optuna.load_study(study_name=name, storage=open_storage(url))
