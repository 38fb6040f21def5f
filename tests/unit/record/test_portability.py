"""Export/import, fingerprints, storage kinds and the SQLite single-writer guard (no engine runs:
trials are injected with create_trial, the engine path is covered by test_study_vllm.py)."""

import gzip
import io
import json
import random
import subprocess
import sys
import tarfile

import optuna
import pytest
from typer.testing import CliRunner

from tuner import study as study_mod
from tuner.cli.app import app
from tuner.errors import InputError
from tuner.record import schema
from tuner.record.storage import artifact_store, default_url, open_storage
from tuner.space import load_space
from tuner.study.lifecycle import fingerprint
from tuner.study.recovery import single_writer

runner = CliRunner()


@pytest.fixture
def handle(studies, vllm_bin, tiny_model_path):
    """A cpu-smoke study with two injected finished trials and a log artifact."""
    space = load_space("cpu-smoke").model_copy(update={"baselines": []})
    h = study_mod.create(space, "moved", default_url("moved"))
    dist = {"max_num_seqs": optuna.distributions.IntDistribution(2, 128, log=True)}
    h.study.add_trial(optuna.trial.create_trial(
        params={"max_num_seqs": 4}, distributions=dist, value=100.0,
        user_attrs={"arm": "search", "feasible": True}, constraints={"engine_start": 0.0}))
    trial = h.study.ask(dist)  # a live trial, as the study loop has, to attach a log to
    trial.set_user_attr("arm", "search")
    trial.set_user_attr("feasible", True)
    trial.set_constraint("engine_start", 0.0)
    log = studies / "server.log"
    log.write_text("INFO started\n")
    optuna.artifacts.upload_artifact(artifact_store=artifact_store(h.url, h.name),
                                     file_path=str(log), study_or_trial=trial,
                                     mimetype="text/plain")
    h.study.tell(trial, 150.0)
    return h


def test_export_import_keeps_trials_attrs_and_artifacts(handle, tmp_path, monkeypatch):
    archive = tmp_path / "moved.tar.gz"
    r = runner.invoke(app, ["export", "moved", str(archive)])
    assert r.exit_code == 0, r.output
    assert json.loads(tarfile.open(archive).extractfile("manifest.json").read())["trials"] == 2

    other = tmp_path / "elsewhere" / "studies"  # another checkout's studies folder
    monkeypatch.setenv("TUNER_STUDIES_DIR", str(other))
    r = runner.invoke(app, ["import", str(archive)])
    assert r.exit_code == 0, r.output
    imported = study_mod.load("moved", default_url("moved"))
    assert [t.state for t in imported.study.trials] == [t.state for t in handle.study.trials]
    assert imported.space == handle.space
    last = imported.study.trials[-1]
    assert last.constraints == {"engine_start": 0.0} and last.user_attrs["feasible"]
    (meta,) = optuna.artifacts.get_all_artifact_meta(last, storage=imported.study._storage)
    with artifact_store(imported.url, "moved").open_reader(meta.artifact_id) as f:
        assert f.read() == b"INFO started\n"
    again = runner.invoke(app, ["import", str(archive)])
    assert again.exit_code == 2 and "already exists" in again.output


def test_a_live_study_exported_resumes_its_running_trial_elsewhere(handle, tmp_path, monkeypatch):
    """A snapshot taken while a trial runs (what the GPU campaign's poll keeps): on the importing
    side that trial can never finish, so it arrives interrupted and `tune resume` re-queues it."""
    dist = {"max_num_seqs": optuna.distributions.IntDistribution(2, 128, log=True)}
    running = handle.study.ask(dist)
    archive = tmp_path / "live.tar.gz"
    assert runner.invoke(app, ["export", "moved", str(archive)]).exit_code == 0
    monkeypatch.setenv("TUNER_STUDIES_DIR", str(tmp_path / "elsewhere"))
    r = runner.invoke(app, ["import", str(archive)])
    assert r.exit_code == 0, r.output
    assert "1 interrupted or failed trials run again" in " ".join(r.output.split())
    imported = study_mod.load("moved", default_url("moved")).study
    moved = imported.trials[running.number]
    assert moved.state == optuna.trial.TrialState.FAIL and moved.user_attrs["interrupted"]
    assert [t.number for t in schema.awaiting_retry(imported.trials)] == [running.number]
    # the exporting side is untouched: its worker may still finish the trial
    assert handle.study.trials[running.number].state == optuna.trial.TrialState.RUNNING


def _tarball(path, members: dict[str, bytes]) -> bytes:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path.read_bytes()


MANIFEST = json.dumps({"format": 1, "study": "s"}).encode()


@pytest.mark.parametrize("make, words", [
    (lambda p: p.write_text("not a tarball"), "not a tune export archive"),
    (lambda p: p.write_bytes(gzip.compress(random.Random(1).randbytes(4096))),
     "not a tune export archive"),
    (lambda p: p.write_bytes(_tarball(p, {"study.db": random.Random(2).randbytes(20000)})[:900]),
     "not a tune export archive"),  # a truncated download
    (lambda p: _tarball(p, {"other.txt": b"x"}), "(member manifest.json: does not exist)"),
    (lambda p: _tarball(p, {"manifest.json": b"\xff\xfe{}"}), "manifest.json: not UTF-8 text"),
    (lambda p: _tarball(p, {"manifest.json": b"[1]"}), "unsupported export format None"),
    (lambda p: _tarball(p, {"manifest.json": MANIFEST, "study.db": b"not sqlite"}),
     "not a tune export archive (study.db:"),
    (lambda p: p.mkdir(), "is a directory"),
], ids=["text", "gzip-not-tar", "truncated", "no-manifest", "manifest-bytes", "manifest-list",
        "db-not-sqlite", "directory"])
def test_bad_archive_is_refused(tmp_path, studies, make, words):
    bad = tmp_path / "bad.tar.gz"
    make(bad)
    r = runner.invoke(app, ["import", str(bad)])
    assert r.exit_code == 2, r.output
    assert f"export archive {bad}: " in r.output and words in r.output
    assert not studies.exists() or not list(studies.glob("*.db"))


def test_changed_hardware_is_refused_and_linked_with_new_hardware(handle):
    handle.study.set_user_attr("fingerprint", {**fingerprint(), "device": "sm80",
                                               "gpu": "NVIDIA A100-SXM4-80GB"})
    r = runner.invoke(app, ["resume", "moved"])
    assert r.exit_code == 2
    assert "was measured on other hardware (device: 'sm80' ->" in r.output
    assert "--new-hardware" in r.output
    linked = study_mod.link_new_hardware(handle, top_k=1)
    assert linked.study.user_attrs["linked_from"] == "moved"
    waiting = [t for t in linked.study.trials if t.state == optuna.trial.TrialState.WAITING]
    assert [t.system_attrs["fixed_params"] for t in waiting] == [handle.study.trials[1].params]
    assert waiting[0].user_attrs["warm_start_of"] == "moved#1"


def test_sqlite_study_refuses_a_second_process(handle):
    with single_writer(handle.url):
        code = ("from tuner.study.recovery import single_writer\n"
                f"with single_writer({handle.url!r}): pass\n")
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode != 0
    assert "SQLite is not safe for several workers" in out.stderr


def test_journal_storage_roundtrip(tmp_path, vllm_bin, tiny_model_path):
    url = str(tmp_path / "s.journal")
    h = study_mod.create(load_space("cpu-smoke"), "j", url)
    assert len(h.study.trials) == 2  # the enqueued baselines
    assert study_mod.load("j", url).space == h.space
    with pytest.raises(InputError, match="no study journal at"):
        open_storage(str(tmp_path / "missing.journal"))


def test_export_replaces_a_file_only_with_force(handle, tmp_path):
    archive = tmp_path / "moved.tar.gz"
    archive.write_text("someone's notes")
    r = runner.invoke(app, ["export", "moved", str(archive)])
    assert r.exit_code == 2 and f"archive {archive}: exists; pass --force to replace it" in r.output
    assert archive.read_text() == "someone's notes"
    assert runner.invoke(app, ["export", "moved", str(archive), "--force"]).exit_code == 0
    assert tarfile.is_tarfile(archive)


@pytest.mark.parametrize("where, why", [("folder", "is a directory; name a file"),
                                        ("afile/x.tar.gz", "afile is a file, not a folder")])
def test_export_to_an_unusable_path_is_named_and_leaves_nothing(handle, tmp_path, where, why):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    before = sorted(p.name for p in tmp_path.iterdir())
    r = runner.invoke(app, ["export", "moved", str(tmp_path / where)])
    assert r.exit_code == 2 and why in r.output
    assert sorted(p.name for p in tmp_path.iterdir()) == before and not list((tmp_path / "folder").iterdir())


def test_an_import_whose_files_cannot_be_written_takes_the_study_out_again(handle, tmp_path, monkeypatch):
    """A study without its artifacts would be refused on a second import ("already exists")."""
    archive = tmp_path / "moved.tar.gz"
    assert runner.invoke(app, ["export", "moved", str(archive)]).exit_code == 0

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as m:
        m.setattr("tuner.record.transfer.shutil.copytree", disk_full)
        r = runner.invoke(app, ["import", str(archive), "--name", "again"])
    assert r.exit_code == 2
    assert "study 'again': cannot write its files to" in r.output and "nothing was imported" in r.output
    r = runner.invoke(app, ["import", str(archive), "--name", "again"])
    assert r.exit_code == 0, r.output
    assert len(study_mod.load("again", default_url("again")).study.trials) == 2


def test_an_import_name_is_one_file_name(handle, tmp_path):
    archive = tmp_path / "moved.tar.gz"
    assert runner.invoke(app, ["export", "moved", str(archive)]).exit_code == 0
    r = runner.invoke(app, ["import", str(archive), "--name", "../evil"])
    assert r.exit_code == 2 and "study name '../evil'" in r.output
    assert not (tmp_path / "evil.db").exists() and not (tmp_path / "evil-files").exists()
