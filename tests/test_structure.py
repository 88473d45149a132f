"""The package's structure: no import circle between kvsim's modules, counting the imports inside functions
(a circle there still ties two modules together, and breaks as soon as either import moves to the top); the
fitting toolchain (kvsim.calibrate) off the simulation path."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "kvsim"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    mods = {_module(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for n in names:
                if n in mods and n != m and not m.startswith(n + "."):  # a package's own __init__ is no edge
                    graph[m].add(n)
    return graph


def test_no_import_circles():
    graph = _graph()
    # packages import their members to re-export them; an __init__ is not a concept of its own
    inits = {m for m in graph if (ROOT.parent / m.replace(".", "/") / "__init__.py").exists()}
    graph = {m: {n for n in e if n not in inits} for m, e in graph.items() if m not in inits}
    state: dict[str, int] = {}
    cycles = []

    def visit(m, stack):
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                cycles.append(stack[stack.index(n) :] + [n])
            elif n not in state:
                visit(n, stack)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m, [])
    assert not cycles, "\n".join(" -> ".join(c) for c in cycles)


def _room(module: str) -> str:
    """The top-level module or package a module belongs to (kvsim.engine.scheduler -> engine)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def test_no_arrow_back_up_between_rooms():
    """Taking each top-level module or package as a room, the rooms' imports form no circle: every room can be
    put on a floor above all it imports (so the option table, below the engine, cannot import the engine's
    policies: the rows name them as "module:NAME" instead)."""
    rooms: dict[str, set[str]] = {}
    why: dict[tuple[str, str], str] = {}
    for m, targets in _graph().items():
        for n in targets:
            a, b = _room(m), _room(n)
            if a != b:
                rooms.setdefault(a, set()).add(b)
                why.setdefault((a, b), f"{m} -> {n}")
    floors: dict[str, int] = {}
    placing: set[str] = set()

    def floor(room: str) -> int:
        if room in floors:
            return floors[room]
        assert room not in placing, f"rooms in a circle through {room}: " + "; ".join(
            w for (a, b), w in why.items() if a in placing and b in placing
        )
        placing.add(room)
        floors[room] = 1 + max((floor(r) for r in rooms.get(room, ())), default=-1)
        placing.discard(room)
        return floors[room]

    for r in sorted(rooms):
        floor(r)
    assert rooms["option_table"] <= {"errors", "validation"}, "the option table imports only errors and validation"
    assert floors["config"] < floors["engine"] and floors["option_table"] < floors["latency"]


def test_simulation_never_imports_the_fitting_toolchain():
    """kvsim.calibrate (readers, fits and validation of measured tables, the script that writes the shipped
    calibrations) is a program beside the simulator: the runtime reads only the fitted parameters (calibration
    JSON). Statically, nothing outside it imports it but `kvsim calibrate`'s command; and importing the runtime
    and running a small simulation end to end (the CLI's `kvsim run`) leaves it unloaded."""
    graph = _graph()
    users = sorted(
        m
        for m, e in graph.items()
        if not m.startswith("kvsim.calibrate")
        and any(n == "kvsim.calibrate" or n.startswith("kvsim.calibrate.") for n in e)
    )
    assert users == ["kvsim.commands.latency"], users
    code = (
        "import sys, tempfile\n"
        "import kvsim, kvsim.runner, kvsim.latency, kvsim.latency.calibration, kvsim.engine.simulator\n"
        "from kvsim.cli import main\n"
        "with tempfile.TemporaryDirectory() as out:\n"
        "    assert main(['run', '--gpu', 'h100-80gb', '--model', 'llama-3.1-8b', '--num-prompts', '4',\n"
        "                 '--random-input-len', '64', '--random-output-len', '8', '--no-plots', '--out', out]) == 0\n"
        "print(sorted(m for m in sys.modules if m == 'kvsim.calibrate' or m.startswith('kvsim.calibrate.')))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT.parent, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "[]", r.stdout[-2000:]
