"""Every shell block of the README and of the guide (docs/) runs as written, in a fresh folder beside the
shipped files, and writes only under kvsim-out/ (never over the committed reports). Slow blocks (the Triton
interpreter, the plan search) run with `-m slow`."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(page.stem, m.group(1)) for page in PAGES for m in re.finditer(r"```bash\n(.*?)```", page.read_text(), re.S)]
SLOW_WORDS = ("kvsim kernels", "kvsim plan", "pytest", "hybrid_compare")


def _id(page: str, block: str) -> str:
    first = next(ln for ln in block.splitlines() if ln.strip())
    return page + ":" + re.sub(r"[^a-z0-9]+", "-", first.lower())[:50]


def _params():
    seen = set()
    for page, b in BLOCKS:
        if b in seen:  # the quickstart stands in the README and on the guide's first page
            continue
        seen.add(b)
        marks = [pytest.mark.slow] if any(w in b for w in SLOW_WORDS) else []
        yield pytest.param(b, id=_id(page, b), marks=marks)


def test_readme_has_no_placeholder_syntax():
    for _, b in BLOCKS:
        assert "[--" not in b and "path/to" not in b, b  # literal brackets or placeholders do not run


@pytest.mark.parametrize("block", list(_params()))
def test_readme_block_runs(block, tmp_path):
    for name in ("traces", "tests", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name)
    # the install step is the session's own (kvsim is installed); run what follows it
    script = "\n".join(ln.split("&&", 1)[1] if ln.startswith("pip install") else ln for ln in block.splitlines())
    if "pytest" in script:
        pytest.skip("the test command is what runs this test")
    env = {**os.environ, "COLUMNS": "80", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if script.strip() == "kvsim ui":  # a server: it must come up and answer, then it is stopped
        _serve_and_stop(tmp_path, env)
        return
    r = subprocess.run(["bash", "-e", "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "Traceback" not in r.stderr
    made = {p.name for p in tmp_path.iterdir()} - {"traces", "tests", "benchmarks"}
    assert made <= {"kvsim-out"}, made  # everything under kvsim-out/, nothing beside the committed files


def _serve_and_stop(folder: Path, env: dict) -> None:
    import socket
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        ["kvsim", "ui", "--port", str(port)], cwd=folder, env=env, stderr=subprocess.PIPE, text=True
    )
    try:
        t_end = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=2) as r:
                    assert r.status == 200
                    break
            except OSError:
                assert proc.poll() is None and time.monotonic() < t_end, "kvsim ui did not come up"
                time.sleep(0.2)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert b"static/app.js" in r.read()
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    made = {p.name for p in folder.iterdir()} - {"traces", "tests", "benchmarks"}
    assert made <= {"kvsim-out"}, made
