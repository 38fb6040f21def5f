"""Every file the tool reads meets bad bytes with one InputError naming the file; the tool's own
files are written atomically."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tuner.bench.datasets import sample_sharegpt
from tuner.engines.model_config import read_model_config
from tuner.engines.spec import EngineSpec
from tuner.errors import InputError
from tuner.files import read_text, write_atomic, write_output
from tuner.record.transfer import import_study
from tuner.report.evaluate import resolve_workloads
from tuner.space import load_space
from tuner.study.replay import Grid
from tuner.yaml_io import load_model

BAD_BYTES = {
    "latin-1": "name: caf\u00e9\n".encode("latin-1"),
    "utf-16": "name: x\n".encode("utf-16"),  # starts with the byte-order mark b"\xff\xfe"
    "binary": bytes(range(256)) * 4,
}


def _readers(tmp_path: Path):
    """(what the file is, a call that reads ``path``): every reader of a user file."""
    space = load_space("cpu-smoke")

    def model_config(p: Path):  # read_model_config takes the folder and reads its config.json
        d = tmp_path / "model"
        d.mkdir(exist_ok=True)
        (d / "config.json").write_bytes(p.read_bytes())
        read_model_config.cache_clear()
        return read_model_config(str(d))

    return {
        "space file": lambda p: load_space(str(p)),
        "engine spec": lambda p: load_model(EngineSpec, p, "engine spec"),
        "ShareGPT file": lambda p: sample_sharegpt(p, None, 4),
        "workload file": lambda p: resolve_workloads(str(p), space),
        "replay grid": lambda p: Grid.load(p),
        "export archive": lambda p: import_study(p, lambda name: f"sqlite:///{tmp_path}/x.db"),
        "model config": model_config,
    }


@pytest.mark.parametrize("reader", ["space file", "engine spec", "ShareGPT file", "workload file",
                                    "replay grid", "export archive", "model config"])
@pytest.mark.parametrize("content", sorted(BAD_BYTES))
def test_every_reader_names_the_file_with_bad_bytes(tmp_path, reader, content):
    path = tmp_path / "input.yaml"
    path.write_bytes(BAD_BYTES[content])
    with pytest.raises(InputError) as err:
        _readers(tmp_path)[reader](path)
    shown = tmp_path / "model" / "config.json" if reader == "model config" else path
    assert str(shown) in str(err.value)
    if reader != "export archive":  # a tarball is bytes: it fails as "not a tune export archive"
        assert "not UTF-8 text" in str(err.value)
    assert not (tmp_path / "x.db").exists()


@pytest.mark.parametrize("reader", ["space file", "engine spec", "ShareGPT file", "workload file",
                                    "replay grid", "export archive"])
def test_every_reader_names_a_directory(tmp_path, reader):
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    with pytest.raises(InputError, match="is a directory") as err:
        _readers(tmp_path)[reader](folder)
    assert str(folder) in str(err.value)


def test_read_text_says_where_and_what(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_bytes(b"name: ok\nmodel: caf\xe9\n")
    with pytest.raises(InputError) as err:
        read_text(p, "space file")
    assert str(err.value) == f"space file {p}: not UTF-8 text: byte 0xe9 at line 2 (byte offset 19)"
    p.write_bytes("x".encode("utf-16"))
    with pytest.raises(InputError, match="UTF-16 byte-order mark: save it as UTF-8"):
        read_text(p, "space file")
    p.write_bytes(b"\xef\xbb\xbfname: bom\n")  # a UTF-8 byte-order mark is UTF-8
    assert read_text(p, "space file") == "\ufeffname: bom\n"
    with pytest.raises(InputError, match=f"space file {tmp_path / 'none'}: does not exist"):
        read_text(tmp_path / "none", "space file")


def test_a_fifo_is_refused_instead_of_blocking(tmp_path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is not a regular file"):
        read_text(fifo, "space file")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_named(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text("name: x\n")
    p.chmod(0)
    with pytest.raises(InputError, match=f"space file {p}: cannot read"):
        read_text(p, "space file")


def test_write_atomic_replaces_whole_and_leaves_nothing_on_error(tmp_path):
    target = tmp_path / "sub" / "out.json"
    write_atomic(target, '{"x": 1}')
    assert target.read_text() == '{"x": 1}'
    assert stat.S_IMODE(target.stat().st_mode) == 0o666 & ~_umask()  # like open(): the umask applies
    with pytest.raises(TypeError):
        write_atomic(target, 123)  # fails mid-write
    assert target.read_text() == '{"x": 1}'
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.json"]
    write_atomic(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"


def _umask() -> int:
    old = os.umask(0)
    os.umask(old)
    return old


@pytest.mark.parametrize("target, why", [("folder", "is a directory; name a file"),
                                         ("afile/out.txt", "afile is a file, not a folder")])
def test_an_output_path_that_cannot_be_a_file_is_named_and_nothing_is_written(tmp_path, target, why):
    (tmp_path / "folder").mkdir()
    (tmp_path / "afile").write_text("x")
    with pytest.raises(InputError, match=f"--out {tmp_path / target}: .*{why}"):
        write_output(tmp_path / target, "data", "--out")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "folder"]
    assert not list((tmp_path / "folder").iterdir()) and (tmp_path / "afile").read_text() == "x"


def test_an_output_the_system_refuses_is_named_with_its_reason(tmp_path):
    with pytest.raises(InputError, match="--save-prior /proc/p.json: cannot write: "):
        write_output(Path("/proc/p.json"), "{}", "--save-prior")
