"""The README is a user's quick start with links, and the docs/ pages it links hold the rest.

Checked here: the README's length and its first two commands (the demo and the test command that
CI runs), that every link of the README and the docs/ pages resolves (file and heading), that every
docs/ page is linked from the README, and that every repository path the pages name exists.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
README_MAX_LINES = 200
DEMO_COMMAND = "bash .ci/setup && . .venv/bin/activate && snakemake && snakemake --report results/report.html"
TEST_COMMAND = "bash .ci/run"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# paths of this repository named in the text, and whether a placeholder (<device>, {run}, *) cuts one short
REPO_PATH = re.compile(
    r"(?<![\w/.-])((?:trainer|analysis|rules|benchmarks|tests|\.ci|profiles|envs|docs)/[\w./-]*)([<{*]?)"
)


def pages() -> list[Path]:
    """README.md and every docs/ page."""
    return [README, *sorted(DOCS.glob("*.md"))]


def anchor(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside fenced code)."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(anchor(line.lstrip("#")))
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of a page (web links left out)."""
    return [t for t in LINK.findall(page.read_text()) if not re.match(r"[a-z]+:", t)]


def fenced_blocks(text: str) -> list[str]:
    """The contents of a text's fenced code blocks, in order."""
    return [b.strip() for b in re.findall(r"^```[a-z]*\n(.*?)^```", text, flags=re.S | re.M)]


def test_readme_is_short() -> None:
    n = len(README.read_text().splitlines())
    assert n < README_MAX_LINES, f"README.md has {n} lines; keep it under {README_MAX_LINES} and move detail to docs/"


def test_readme_starts_with_the_demo_and_the_test_command() -> None:
    blocks = fenced_blocks(README.read_text())
    assert blocks[:2] == [DEMO_COMMAND, TEST_COMMAND], f"README.md's first two commands are {blocks[:2]}"
    assert "bash .ci/setup" in (ROOT / ".ci" / "run").read_text(), ".ci/run no longer sets up the environment"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_every_link_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT)}")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            broken.append(f"{target}: no heading with anchor #{fragment} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: broken links:\n  " + "\n  ".join(broken)


def test_every_docs_page_is_linked_from_the_readme() -> None:
    linked = {(README.parent / t.partition("#")[0]).resolve() for t in links(README)}
    unlinked = [p.name for p in DOCS.glob("*.md") if p.resolve() not in linked]
    assert not unlinked, f"docs/ pages the README does not link: {sorted(unlinked)}"


@pytest.mark.parametrize("page", pages(), ids=lambda p: p.name)
def test_named_repository_paths_exist(page: Path) -> None:
    # a path cut by a placeholder (`device-check-<device>.json`) is checked as far as its folder
    named = {
        (path[: path.rfind("/") + 1] if placeholder else path).rstrip(".,:;")
        for path, placeholder in REPO_PATH.findall(page.read_text())
    }
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert not missing, f"{page.relative_to(ROOT)} names paths that do not exist: {missing}"


def test_anchor_follows_github() -> None:
    assert anchor(" The memory model at Qwen3-0.6B's real width") == "the-memory-model-at-qwen3-06bs-real-width"
    assert anchor("Jobs and GPUs") == "jobs-and-gpus"
