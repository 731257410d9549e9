"""The operator's command line, ``flashsale`` (entry point ``flashsale.cli:main``): one module
per command group, and the pieces they share (parsing, validation, confirmation, output)."""

from flashsale.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
