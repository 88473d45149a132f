"""The package layout: every kvsim subpackage is installed, and the kernels never import kvsim."""

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_every_kvsim_subpackage_is_listed_in_pyproject():
    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "kvsim").rglob("__init__.py")}
    assert found <= listed, f"add to pyproject.toml [tool.setuptools] packages: {sorted(found - listed)}"
    assert "kvsim_kernels" in listed


def test_kernels_do_not_import_kvsim():
    for path in (ROOT / "kernels").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and not node.level
                else []
            )
            assert not any(n == "kvsim" or n.startswith("kvsim.") for n in names), f"{path.name} imports kvsim"


def test_cli_is_imported_by_nothing_in_the_package():
    """`cli` depends on everything; nothing depends on `cli` (no import cycle)."""
    for path in (ROOT / "kvsim").rglob("*.py"):
        if path.name in ("cli.py", "__main__.py"):
            continue
        assert "kvsim.cli" not in path.read_text(), f"{path.relative_to(ROOT)} imports kvsim.cli"
