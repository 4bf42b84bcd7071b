"""The `kg` command line: `app` (commands) above `render` (output) and `demo`."""

from kg.cli.app import app, main

__all__ = ["app", "main"]
