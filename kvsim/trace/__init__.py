"""Request traces: the format, loading with validation, synthetic generation and statistics."""

from kvsim.trace.request import Request
from kvsim.trace.jsonl import LoadedTrace, write_trace
from kvsim.trace.loading import load_trace

__all__ = ["Request", "LoadedTrace", "load_trace", "write_trace"]
