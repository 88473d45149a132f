"""Readable reports: a self-contained HTML page and the same content as Markdown."""
