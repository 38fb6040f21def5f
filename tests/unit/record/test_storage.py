"""The study file is never seen half-made: a reader that opens it while a study starts (a dashboard,
a status poll) would otherwise create Optuna's schema too, and the writer would fail on the
schema's version row (seen in CI)."""

from __future__ import annotations

import sqlite3

import optuna

from tuner.record import storage as storage_mod


def test_the_study_file_only_ever_shows_a_complete_schema(tmp_path, monkeypatch):
    db = tmp_path / "studies" / "s.db"
    seen = []
    real = optuna.storages.RDBStorage

    class Observed(real):
        def __init__(self, url, *args, **kwargs):
            # Every moment the writer opens a database is a moment a reader could open the file.
            if db.exists():
                with sqlite3.connect(db) as conn:
                    seen.append({r[0] for r in conn.execute(
                        "SELECT name FROM sqlite_master WHERE type='table'")})
            super().__init__(url, *args, **kwargs)

    monkeypatch.setattr(optuna.storages, "RDBStorage", Observed)
    storage = storage_mod.open_storage(f"sqlite:///{db}", create=True)
    optuna.create_study(study_name="s", storage=storage)
    assert seen, "the file was never opened after it appeared"
    assert all({"studies", "alembic_version"} <= tables for tables in seen), seen
    assert [p.name for p in db.parent.iterdir()] == ["s.db"]  # no temporary file left


def test_a_second_creator_uses_the_first_ones_file(tmp_path):
    url = f"sqlite:///{tmp_path / 's.db'}"
    optuna.create_study(study_name="a", storage=storage_mod.open_storage(url, create=True))
    again = storage_mod.open_storage(url, create=True)
    assert [s.study_name for s in optuna.get_all_study_summaries(again)] == ["a"]
