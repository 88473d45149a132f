"""Errors a user can act on. The CLI prints them without a traceback."""


class KvsimError(Exception):
    """Base class for every error the CLI reports as a one-line message."""


class ConfigError(KvsimError):
    """An impossible or inconsistent configuration (model does not fit, bad flag value, ...)."""


class TraceError(KvsimError):
    """A trace line that cannot be used; names the file, line number, field and reason."""

    def __init__(self, path: str, line: int, field: str | None, reason: str):
        self.path, self.line, self.field, self.reason = path, line, field, reason
        where = f"{path}:{line}" + (f": field '{field}'" if field else "")
        super().__init__(f"{where}: {reason}")

    def __reduce__(self):
        # Rebuilt from its fields, so it crosses process boundaries (a sweep worker's error reaches the parent).
        return (TraceError, (self.path, self.line, self.field, self.reason))
