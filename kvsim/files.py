"""Reading and writing files with errors a user can act on (one line naming the file), and atomic writes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from kvsim.errors import ConfigError


def read_json_object(path: str | Path, label: str) -> dict:
    """The JSON object in ``path``; errors say ``label`` (e.g. '--model config.json') and why."""
    try:
        d = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"{label}: cannot read: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{label}: not JSON ({e})") from None
    if not isinstance(d, dict):
        raise ConfigError(f"{label}: expected a JSON object")
    return d


def write_text_atomically(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder, so a reader never sees half."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
