"""The guide (docs/, a MkDocs site) and the README: every relative link reaches a file of the repository and
every anchor a heading of its page; the site builds with --strict; the README's first screen answers the
planner's questions with one command each (the commands themselves run in tests/test_readme.py)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """A heading's anchor, as GitHub and MkDocs' toc make it."""
    s = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return s.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # headings, not comments in code
    return {slug(m.group(1)) for m in re.finditer(r"^#{1,6} (.*)$", text, re.M)}


def links(page: Path):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for m in LINK.finditer(text):
        target = m.group(1)
        if not re.match(r"[a-z]+:", target):
            yield target


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_reaches_a_file_and_every_anchor_a_heading(page):
    for target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        assert dest.exists(), f"{page.name}: link to {target}: no such file"
        assert ROOT in dest.parents or dest == ROOT, f"{page.name}: {target} leaves the repository"
        if frag and dest.suffix == ".md":
            assert frag in anchors(dest), f"{page.name}: link to {target}: no such heading in {dest.name}"


def test_every_page_is_in_the_site_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    for page in (ROOT / "docs").glob("*.md"):
        assert f": {page.name}" in nav, f"docs/{page.name} is not in mkdocs.yml's nav"


def test_the_site_builds_strictly(tmp_path):
    if shutil.which("mkdocs") is None and subprocess.run([sys.executable, "-c", "import mkdocs"]).returncode:
        pytest.skip("mkdocs is not installed (it comes with kvsim[dev])")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(tmp_path / "site"),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert (tmp_path / "site" / "fleets" / "index.html").exists()


def test_the_readme_first_screen_answers_the_planner_questions():
    """Memory and fit, block size, prefix savings and GPUs for a rate, one command each, before the guide's
    table of contents; the README stays short (the guide holds the rest)."""
    text = (ROOT / "README.md").read_text()
    first = text.split("## Documentation")[0]
    blocks = re.findall(r"```bash\n(.*?)```", first, re.S)
    for command in ("kvsim memory", "kvsim compare", "kvsim plan"):
        assert any(command in b for b in blocks), command
    assert "--allocators paged:8,paged:16" in first and "+prefix" in first and "--fleet-max-gpus" in first
    assert len(text.split()) < 1500, "the README is the first screen; move detail into docs/"
