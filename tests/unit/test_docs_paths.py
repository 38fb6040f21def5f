"""The documentation's links and the repository paths it names exist: a findings page's "how to
reproduce" that names a moved file or a removed script cannot be followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The pages, and the comments of the spaces, which name the findings they produced.
PAGES = sorted([ROOT / "README.md", ROOT / "studies" / "README.md", ROOT / "benchmarks" / "README.md",
                *(ROOT / "docs").rglob("*.md"), *(ROOT / "experiments").glob("*/README.md"),
                *(ROOT / "experiments").rglob("*.yaml"), *(ROOT / "search_spaces").glob("*.yaml")])
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
# A path into this repository's top-level folders; one preceded by a word or a slash (vLLM's
# vllm/benchmarks/serve.py) is another project's, one after REV: is in the repository's history.
PATH = re.compile(r"(?<![\w/.:^-])((?:benchmarks|docs|engines|experiments|scripts|search_spaces|studies|tests|tuner)/[\w./-]*\w)")
# Only in the wheel (pyproject's force-include).
WHEEL_ONLY = "tuner/_data"
# A fenced block that first checks out another revision names that revision's paths.
OTHER_TREE = re.compile(r"```[a-z]*\n(?:(?!```).)*git worktree add(?:(?!```).)*```", re.S)


def _pages() -> list[Path]:
    return [p for p in PAGES if p.is_file()]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_named_path_exists(page: Path) -> None:
    text = OTHER_TREE.sub("", page.read_text())
    missing = [target for target in LINK.findall(text)
               if "://" not in target and not target.startswith("mailto:")
               and not (page.parent / target).exists()]
    missing += [path for path in PATH.findall(text)
                if not any((ROOT / path).exists() or (ROOT / path).with_suffix(s).exists()
                           for s in ("", ".py")) and not path.startswith(WHEEL_ONLY)]
    assert not missing, f"{page.relative_to(ROOT)} names what is not there: {sorted(set(missing))}"
