"""`tune engine kit`: an engine's wheels for an offline GPU host, in parts, with their installer."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from tuner.cli.common import App, console
from tuner.paths import HOST_PACKAGES_FILE

engine_app = App(no_args_is_help=True, help="Engines for offline hosts: wheelhouses in parts, installed into folders.")


@engine_app.command("kit")
def kit(
    requirement: str = typer.Argument(..., help="The engine release, e.g. vllm==0.25.1 or sglang==0.5.17."),
    out: Path = typer.Option(..., "--out", help="Folder for the parts, SHA256SUMS, manifest and install.sh."),
    host_packages: Path = typer.Option(HOST_PACKAGES_FILE, "--host-packages", show_default=False,
                                       help="The host's `pip list --format freeze` (default: an H200 "
                                       "host's CUDA image, engines/hosts/h200-cuda-image.txt)."),
    python_version: str = typer.Option("3.12", "--python-version", help="The host's Python X.Y."),
    platform: str = typer.Option("manylinux_2_39_x86_64", help="The host's platform tag (glibc 2.39 on the H200 image)."),
    split: Optional[str] = typer.Option(None, help="Largest part, e.g. 60M, for a size-limited transfer."),
    trim: bool = typer.Option(False, "--trim", help="Remove the files the engine spec's kit.trim names from "
                              "upstream wheels (each listed in the wheel's TRIMMED.txt and in kit.json)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Resolve and write the manifest; download nothing."),
    resolver_python: Optional[str] = typer.Option(None, help="A Python of --python-version to resolve with."),
    lock: Optional[Path] = typer.Option(None, "--lock", help="A kit's manifest.txt: carry the same versions "
                                        "it did (rebuild the kit a study ran with)."),
) -> None:
    """Resolve an engine against the host's packages and pack what the host lacks."""
    from tuner.kit import make_kit, parse_size
    size = parse_size(split) if split else None
    result = make_kit(requirement, out, host_file=host_packages, python_version=python_version,
                      platform=platform, split=size, trim=trim, dry_run=dry_run, python=resolver_python,
                      lock_file=lock)
    res = result.resolution
    table = Table("wheel", "version", "why it is in the kit", title=f"{requirement}: {len(res.wheels)} wheels")
    for w in res.wheels:
        table.add_row(w.name, w.version, w.why)
    console.print(table)
    console.print(f"left out: {len(res.left_out)} (see {out / 'left-out.txt'})", highlight=False)
    if dry_run:
        console.print(f"dry run: manifest with the index's hashes in {out / 'manifest.txt'}; nothing downloaded",
                      highlight=False)
        return
    for p in result.parts:
        console.print(f"  {p.name}  {p.stat().st_size / 2**20:.1f} MiB", highlight=False)
    console.print(f"on the host, with the parts beside it: bash {out}/install.sh --target DIR", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(engine_app, name="engine")
