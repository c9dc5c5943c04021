"""The parser every ``python -m`` command of the project starts from: its module's docstring as the
help text. It imports only the standard library, so that :mod:`tasks.cli` (which reads the stage
declarations) and :mod:`tasks.stages` (whose own command needs a parser) both build on it without
needing each other."""

from __future__ import annotations

import argparse
import re


def help_text(doc: str | None) -> str:
    """A module docstring as a terminal shows it: reST roles and literals as plain words
    (``:mod:`flows.workspace``` -> ``flows.workspace``), examples kept as written."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"\1", doc or "")
    return text.replace("``", "").strip()


def command_parser(module: str, doc: str | None, epilog: str | None = None) -> argparse.ArgumentParser:
    """The parser of ``python -m <module>``: its docstring as the help text, examples kept as written."""
    return argparse.ArgumentParser(
        prog=f"python -m {module}",
        description=help_text(doc),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
