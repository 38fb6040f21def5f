"""The kit's resolution against a host's package list: real pip and the real index for vLLM 0.25.1
(dry run: metadata only, no wheel downloaded), and the rules on a small made-up closure."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tuner.cli.app import app
from tuner.engines.spec import Kit, KitOmit
from tuner.errors import InputError
from tuner.kit import resolver_python
from tuner.kit.resolve import host_packages, resolve
from tests.helpers import REPO, run_tune

resolve_mod = importlib.import_module("tuner.kit.resolve")  # the package re-exports resolve()
kit_pkg = importlib.import_module("tuner.kit")


def _item(name: str, version: str, requires: list[str], requested: bool = False) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": requires},
            "requested": requested,
            "download_info": {"url": f"https://files.example/{name}-{version}-py3-none-any.whl",
                              "archive_info": {"hashes": {"sha256": name * 2}}}}


ENV = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
       "platform_machine": "x86_64", "platform_system": "Linux", "os_name": "posix",
       "implementation_name": "cpython", "platform_python_implementation": "CPython",
       "implementation_version": "3.12.3", "platform_release": "", "platform_version": ""}


def test_rules_on_a_small_closure(monkeypatch: pytest.MonkeyPatch) -> None:
    """engine needs web (missing), numpy (host's fits), tokenizers<0.23 (host's 0.23 does not), a
    lazily imported kernel pack (omitted, with its own CUDA wheel), and numba==0.60 (host's 0.68
    kept: its numpy<2.5 pin must not drag numpy into the kit)."""
    report = {"environment": ENV, "install": [
        _item("engine", "1.0", ["web>=1", "numpy", "tokenizers<0.23", "kernels", "numba==0.60",
                                "winonly; sys_platform == 'win32'"], requested=True),
        _item("web", "2.0", ["numpy>=1"]), _item("numpy", "2.4.0", []),
        _item("tokenizers", "0.22.2", []), _item("kernels", "0.1", ["cuda-toolchain"]),
        _item("cuda-toolchain", "13.0", []), _item("numba", "0.60.0", ["numpy<2.5"])]}
    calls = []

    def fake(python, requirement, python_version, platforms, constraints):
        calls.append(constraints)
        return report

    monkeypatch.setattr(resolve_mod, "pip_report", fake)
    kit = Kit(package="engine", omit=[KitOmit(names=["kernels"], why="imported lazily")],
              keep_host={"numba": "works"}, source="test")
    host = {"numpy": "2.5.2", "tokenizers": "0.23.2", "numba": "0.68.0"}
    res = resolve(kit, "engine==1.0", host, python="python3.12", python_version="3.12", platforms=("x",))
    assert {w.name: w.why for w in res.wheels} == {
        "engine": "not on the host", "web": "not on the host",
        "tokenizers": "the host's 0.23.2 is unusable: engine needs tokenizers<0.23"}
    left = {x.name: x.why for x in res.left_out}
    assert left["numpy"] == "on the host (2.5.2)"
    assert left["kernels"] == "imported lazily"
    assert left["cuda-toolchain"] == "needed only by what is left out"
    assert left["numba"].startswith("the host's 0.68.0 is kept")
    # the second pass holds nothing that a left-out package pins otherwise: numba wants numpy<2.5
    assert "numpy==2.5.2" not in calls[1] and "numba==0.68.0" not in calls[1]


def test_host_list_errors_name_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "freeze.txt"
    bad.write_text("torch==2.11.0\nsomething @ file:///x\n")
    with pytest.raises(InputError, match=r"freeze.txt:2: .* is not `name==version`"):
        host_packages(bad)


def test_unpinned_and_unknown_engines_exit_2(tmp_path: Path) -> None:
    for req, message in (("vllm", "pin the engine's version"), ("nosuch==1.0", "no engine spec has a kit")):
        proc = run_tune("engine", "kit", req, "--out", str(tmp_path / "k"), "--dry-run")
        assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "k").exists()


def test_vllm_dry_run_resolves_against_the_h200_image_without_downloading(tmp_path: Path) -> None:
    """The real index, the real H200 image list: the 43 wheels that served there
    (experiments/h200-2026-12/data/kits/vllm-0.25.1-manifest.txt), with the index's sha256, and
    nothing fetched."""
    try:
        resolver_python("3.12", None)
    except InputError as exc:
        pytest.skip(str(exc))
    out = tmp_path / "kit"
    proc = run_tune("engine", "kit", "vllm==0.25.1", "--out", str(out), "--dry-run",
                    "--host-packages", str(REPO / "engines" / "hosts" / "h200-cuda-image.txt"), timeout=1200)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads((out / "kit.json").read_text())
    wheels = {w["name"].lower().replace("_", "-"): w for w in doc["wheels"]}
    assert len(wheels) == 43
    assert wheels["vllm"]["sha256"] == "16fc7a28df1576eb6f7ca0455026551b8f9adb674c19c66059359ef3e964bd1e"
    assert wheels["openai"]["version"].startswith("2.")          # the kit's pin: openai<3
    assert {"fastapi", "uvicorn", "pydantic", "pyzmq", "msgspec", "compressed-tensors"} <= set(wheels)
    left = {x["name"].lower(): x["why"] for x in doc["left_out"]}
    assert left["torch"].startswith("on the host (2.11.0")
    assert "imported lazily" in left["flashinfer-python"]
    assert left["numba"].startswith("the host's 0.68.0 is kept")
    assert "numpy" not in wheels and "transformers" not in wheels
    manifest = (out / "manifest.txt").read_text()
    assert "vllm==0.25.1 --hash=sha256:16fc7a28" in manifest
    assert not list(out.glob("*.part*")) and not list(out.rglob("*.whl"))


@pytest.mark.parametrize("given, words", [
    ("/nonexistent/python", "does not exist"),
    ("{tmp}", "is a folder"),
    ("{tmp}/plain", "is not executable"),
    ("{tmp}/script", "does not run as a Python"),
    (sys.executable, "is Python {version}"),
])
def test_a_given_resolver_python_is_named_with_what_is_wrong(tmp_path: Path, given: str, words: str) -> None:
    (tmp_path / "plain").write_text("")
    (tmp_path / "script").write_text("#!/bin/sh\necho hello\n")
    (tmp_path / "script").chmod(0o755)
    given = given.format(tmp=tmp_path)
    words = words.format(version="%d.%d" % sys.version_info[:2])
    # 3.99: no Python here is that version, so no resolve can start
    with pytest.raises(InputError, match=re.escape(f"--resolver-python {given} {words}; it must be a Python 3.99")):
        resolver_python("3.99", given)


def test_kit_names_a_bad_resolver_python_and_out_before_resolving(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    def no_resolve(*args: object, **kwargs: object) -> None:
        raise AssertionError("the inputs are checked before any resolve")
    monkeypatch.setattr(kit_pkg, "resolve", no_resolve)
    afile = tmp_path / "afile"
    afile.write_text("x")
    cases = ((["--out", str(tmp_path / "k"), "--resolver-python", "/nonexistent/python"],
              "error: --resolver-python /nonexistent/python does not exist"),
             (["--out", str(afile)], f"error: --out {afile} is a file, not a folder"),
             (["--out", str(afile / "k")], f"error: --out {afile / 'k'}: {afile} is a file, not a folder"))
    for args, message in cases:
        r = CliRunner().invoke(app, ["engine", "kit", "vllm==0.25.1", "--dry-run", *args])
        assert r.exit_code == 2, r.output
        assert message in r.output and "Traceback" not in r.output
    assert sorted(tmp_path.iterdir()) == [afile] and afile.read_text() == "x"


def test_a_lock_holds_what_the_host_lacks_at_the_kit_versions(monkeypatch: pytest.MonkeyPatch,
                                                               tmp_path: Path) -> None:
    """A kit's manifest as the lock: both passes pin the wheels it carried; the host's own packages
    stay the host's; a lock from another release of the engine is refused before pip runs."""
    report = {"environment": ENV, "install": [
        _item("engine", "1.0", ["web>=1", "numpy"], requested=True),
        _item("web", "2.0", []), _item("numpy", "2.5.2", [])]}
    calls = []

    def fake(python, requirement, python_version, platforms, constraints):
        calls.append(constraints)
        return report

    monkeypatch.setattr(resolve_mod, "pip_report", fake)
    manifest = tmp_path / "manifest.txt"
    manifest.write_text("# pip requirements with hashes\n"
                        "engine==1.0 --hash=sha256:aa  # engine-1.0-py3-none-any.whl: not on the host\n"
                        "Web==1.5 --hash=sha256:bb  # web-1.5-py3-none-any.whl: not on the host\n"
                        "numpy==2.4.0 --hash=sha256:cc  # numpy: the host's copy wins\n")
    lock = resolve_mod.kit_lock(manifest)
    assert lock == {"engine": "1.0", "web": "1.5", "numpy": "2.4.0"}
    kit = Kit(package="engine", source="test")
    resolve(kit, "engine==1.0", {"numpy": "2.5.2"}, python="python3.12", python_version="3.12",
            platforms=("x",), lock=lock)
    assert all({"engine==1.0", "web==1.5"} <= set(c) for c in calls)
    assert "numpy==2.4.0" not in calls[0] and "numpy==2.4.0" not in calls[1]
    calls.clear()
    with pytest.raises(InputError, match=r"the lock carries engine 1.0, which engine==2.0 excludes"):
        resolve(kit, "engine==2.0", {}, python="python3.12", python_version="3.12", platforms=("x",),
                lock=lock)
    assert not calls


def test_a_bad_lock_is_named_with_its_line(tmp_path: Path) -> None:
    bad = tmp_path / "manifest.txt"
    bad.write_text("web==1.5 --hash=sha256:bb\nweb>=1.5\n")
    with pytest.raises(InputError, match=r"manifest.txt:2: 'web>=1.5' is not `name==version` \(give a kit's manifest.txt\)"):
        resolve_mod.kit_lock(bad)
    proc = run_tune("engine", "kit", "vllm==0.25.1", "--out", str(tmp_path / "kit"), "--dry-run",
                    "--lock", str(tmp_path / "missing.txt"))
    assert proc.returncode == 2 and "missing.txt" in proc.stderr and "Traceback" not in proc.stderr
