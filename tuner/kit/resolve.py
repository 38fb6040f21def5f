"""Which wheels an engine needs on a host whose packages are fixed: resolved by pip against the host's
own package list, keeping only what the host lacks or has at a version the engine cannot use.

pip resolves twice without downloading a wheel (``--dry-run --report``; the index serves each
wheel's metadata): first freely, to learn every requirement in the engine's closure, then with the
host's usable versions as constraints, so the result is one consistent set in which the host's
packages are the host's. The engine spec's ``kit:`` data then takes out what a served dense model
never imports (each with its reason), and everything reachable only through those goes with them.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from tuner.engines.spec import Kit
from tuner.errors import InputError
from tuner.files import read_text


@dataclass(frozen=True)
class Wheel:
    """One wheel of the kit, as the index serves it (sha256 and url from pip's report)."""

    name: str
    version: str
    filename: str
    url: str
    sha256: str
    why: str


@dataclass(frozen=True)
class LeftOut:
    name: str
    version: str
    why: str


@dataclass(frozen=True)
class Resolution:
    requirement: str
    wheels: tuple[Wheel, ...]
    left_out: tuple[LeftOut, ...]
    host_file: str
    python_version: str
    platforms: tuple[str, ...]


def _versions(path: Path, what: str, hint: str) -> dict[str, str]:
    """``name==version`` at the start of each line (what follows, e.g. ``--hash=...``, is ignored),
    by canonical name; comments, blank lines and option lines are skipped."""
    out: dict[str, str] = {}
    for n, line in enumerate(read_text(path, what).splitlines(), 1):
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        first = line.split()[0]
        if "==" not in first or " @ " in line:
            raise InputError(f"{path}:{n}: {line!r} is not `name==version` ({hint})")
        name, version = first.split("==", 1)
        out[canonicalize_name(name)] = version
    if not out:
        raise InputError(f"{path}: no `name==version` lines ({hint})")
    return out


def host_packages(path: Path) -> dict[str, str]:
    """``name==version`` lines of a ``pip freeze``/``pip list --format freeze`` file, by canonical name."""
    return _versions(path, "host package list", "write the list with `pip list --format freeze` on the host")


def kit_lock(path: Path) -> dict[str, str]:
    """The versions a kit carried, from its ``manifest.txt`` (or any ``name==version`` list)."""
    return _versions(path, "kit lock", "give a kit's manifest.txt")


def platform_tags(platform: str) -> tuple[str, ...]:
    """A manylinux_2_N host also runs every older manylinux wheel; pip takes tags literally."""
    import re

    m = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not m:
        return (platform,)
    glibc, arch = int(m.group(1)), m.group(2)
    tags = [f"manylinux_2_{g}_{arch}" for g in range(glibc, 4, -1)]
    tags += [f"manylinux2014_{arch}"] * (glibc >= 17) + [f"manylinux2010_{arch}"] * (glibc >= 12)
    return (*tags, f"manylinux1_{arch}")


def pip_report(python: str, requirements: list[str], python_version: str, platforms: tuple[str, ...],
               constraints: list[str]) -> dict:
    """pip's installation report for ``requirements`` on the target host, downloading no wheel."""
    with tempfile.TemporaryDirectory(prefix="tuner-kit-") as tmp:
        report, cons = Path(tmp) / "report.json", Path(tmp) / "constraints.txt"
        cons.write_text("".join(c + "\n" for c in constraints))
        argv = [python, "-m", "pip", "install", "--dry-run", "--ignore-installed",
                "--report", str(report), "--only-binary=:all:", "--python-version", python_version,
                "--implementation", "cp", "--target", str(Path(tmp) / "target"), "-c", str(cons)]
        for tag in platforms:
            argv += ["--platform", tag]
        proc = subprocess.run([*argv, *requirements], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            text = proc.stdout + proc.stderr
            cause = text[text.find("The conflict is caused by"):] if "The conflict is caused by" in text else ""
            lines = [ln for ln in (cause or proc.stderr).splitlines()
                     if ln.strip() and not ln.startswith(("WARNING: Location", "To fix", "1.", "2."))]
            raise InputError(f"pip could not resolve {' '.join(requirements)} for the host:\n"
                             + "\n".join(lines[:15]))
        return json.loads(report.read_text())


def _requires(item: dict, extras: set[str], env: dict[str, str]) -> list[Requirement]:
    """The live requirements of a resolved item, with the extras its dependants asked for."""
    out = []
    for text in item["metadata"].get("requires_dist", []) or []:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or any(_marker_true(req.marker, env, e) for e in ("", *extras)):
            out.append(req)
    return out


def _marker_true(marker: Marker, env: dict[str, str], extra: str) -> bool:
    return marker.evaluate({**env, "extra": extra})


def _graph(report: dict, root: Requirement, also: dict[str, str]) -> tuple[dict[str, dict], dict[str, list[Requirement]]]:
    """Items by canonical name, and each one's live requirements (extras propagated to a fixpoint)."""
    items = {canonicalize_name(i["metadata"]["name"]): i for i in report["install"]}
    env = report["environment"]
    extras: dict[str, set[str]] = {n: set() for n in items}
    for r in [root, *map(Requirement, also)]:
        extras[canonicalize_name(r.name)] |= r.extras
    while True:
        edges = {n: _requires(items[n], extras[n], env) for n in items}
        grown = False
        for reqs in edges.values():
            for r in reqs:
                child = canonicalize_name(r.name)
                if child in extras and not r.extras <= extras[child]:
                    extras[child] |= r.extras
                    grown = True
        if not grown:
            return items, edges


def _reachable(roots: list[str], edges: dict[str, list[Requirement]], stop: set[str]) -> set[str]:
    seen, stack = set(), list(roots)
    while stack:
        name = stack.pop()
        if name in seen or name not in edges:
            continue
        seen.add(name)
        if name not in stop:
            stack += [canonicalize_name(r.name) for r in edges[name]]
    return seen


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _usable(host_version: str, specs: list[tuple[str, Requirement]]) -> str | None:
    """None if the host's version satisfies every dependant's specifier, else the first that fails."""
    try:
        v = Version(host_version)
    except InvalidVersion:
        return f"the host's version {host_version!r} is not a PEP 440 version"
    for by, req in specs:
        if not req.specifier.contains(v, prereleases=True):
            return f"{by} needs {req.name}{req.specifier}"
    return None


def resolve(kit: Kit, requirement: str, host: dict[str, str], *, python: str, python_version: str,
            platforms: tuple[str, ...], host_file: str = "",
            lock: dict[str, str] | None = None) -> Resolution:
    """The wheels to carry for ``requirement`` (e.g. ``vllm==0.25.1``) and what is left out, why.

    ``lock`` (a kit's manifest, by name) holds every wheel the host lacks at the version that kit
    carried, so a kit rebuilt later carries the same wheels as the one a study ran with, not the
    index's newest releases that satisfy the same requirements."""
    try:
        req = Requirement(requirement)
    except InvalidRequirement as e:
        raise InputError(f"engine requirement {requirement!r} is not a requirement (e.g. vllm==0.25.1): {e}") from None
    root = canonicalize_name(req.name)
    extra_roots = [canonicalize_name(Requirement(r).name) for r in kit.undeclared]
    lock = lock or {}
    if root in lock and not req.specifier.contains(lock[root], prereleases=True):
        raise InputError(f"the lock carries {root} {lock[root]}, which {requirement} excludes: "
                         f"give the manifest of a {requirement} kit")
    pins = list(kit.pins) + [f"{n}=={v}" for n, v in sorted(lock.items()) if n not in host]
    omitted = {canonicalize_name(n): o.why for o in kit.omit for n in o.names}
    keep = {canonicalize_name(n): why for n, why in kit.keep_host.items()}
    undeclared = {canonicalize_name(Requirement(r).name): why for r, why in kit.undeclared.items()}

    roots = [requirement, *kit.undeclared]
    free = pip_report(python, roots, python_version, platforms, pins)
    items, edges = _graph(free, req, kit.undeclared)
    dependants: dict[str, list[tuple[str, Requirement]]] = {}   # what the kit's own wheels need
    pinned_by_all: dict[str, list[tuple[str, Requirement]]] = {}  # and what pip resolves besides
    for parent, reqs in edges.items():
        for r in reqs:
            pinned_by_all.setdefault(canonicalize_name(r.name), []).append((parent, r))
            if parent not in omitted and parent not in keep:  # left out, or the host's own copy
                dependants.setdefault(canonicalize_name(r.name), []).append((parent, r))
    needed = _reachable([root, *extra_roots], edges, stop={*omitted, *keep})
    unusable = {n: why for n in needed if n in host and n not in keep
                and (why := _usable(host[n], dependants.get(n, [])))}
    # Held at the host's version: what the kit needs, unless a left-out package's pin (which pip
    # still resolves) forbids it; the host's copy is used there all the same.
    constraints = pins + [f"{n}=={_public(v)}" for n, v in sorted(host.items())
                          if n in needed and n not in unusable and n not in keep and n not in omitted
                          and _usable(v, pinned_by_all.get(n, [])) is None]

    fixed = pip_report(python, roots, python_version, platforms, constraints)
    items, edges = _graph(fixed, req, kit.undeclared)
    wheels: list[Wheel] = []
    left: dict[str, LeftOut] = {}
    seen, stack = set(), [root, *extra_roots]
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        item = items[name]
        version = item["metadata"]["version"]
        if name in omitted:
            left[name] = LeftOut(name, version, omitted[name])
            continue
        if name in keep:
            left[name] = LeftOut(name, version, f"the host's {host[name]} is kept: {keep[name]}")
            continue
        if name in host and name not in unusable:
            left[name] = LeftOut(name, version, f"on the host ({host[name]})")
            continue
        info = item["download_info"]
        why = (f"the host's {host[name]} is unusable: {unusable[name]}" if name in unusable
               else f"imported undeclared: {undeclared[name]}" if name in undeclared
               else "not on the host")
        wheels.append(Wheel(item["metadata"]["name"], version, info["url"].rsplit("/", 1)[-1],
                            info["url"], info["archive_info"]["hashes"]["sha256"], why))
        stack += [canonicalize_name(r.name) for r in edges[name]]
    unreached = [LeftOut(n, i["metadata"]["version"], "needed only by what is left out")
                 for n, i in items.items() if n not in seen and n not in host]
    return Resolution(requirement, tuple(sorted(wheels, key=lambda w: w.name.lower())),
                      tuple(sorted([*left.values(), *unreached], key=lambda x: x.name)),
                      host_file, python_version, platforms)
