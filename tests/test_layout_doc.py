"""docs/layout.md names every module of the package, so a new module is placed in it when it is written."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_module_is_in_the_layout_page():
    text = (ROOT / "docs" / "layout.md").read_text()
    missing = []
    for p in sorted((ROOT / "kvsim").rglob("*.py")):
        if p.name in ("__init__.py", "__main__.py"):
            continue
        rel = p.relative_to(ROOT).as_posix()
        top = p.parent == ROOT / "kvsim"
        if rel not in text and (top or p.name not in text):
            missing.append(rel)
    assert not missing, f"docs/layout.md does not place: {', '.join(missing)}"
    for d in sorted(x for x in (ROOT / "kvsim").iterdir() if x.is_dir() and x.name != "__pycache__"):
        assert f"kvsim/{d.name}/" in text, f"docs/layout.md has no line for kvsim/{d.name}/"
