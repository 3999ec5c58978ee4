"""`verl-bundle` and `python -m verl_bundle`: `--version` and `--help` are answered here, before
typer (about 0.1 s of imports) is loaded; everything else goes to verl_bundle.cli.main.

The help text is typer's own, kept in verl_bundle/cli/helptext.py; a test checks that the two agree.
"""

from __future__ import annotations

import os
import sys


def _columns() -> int:
    """The terminal's width as shutil.get_terminal_size (which click uses) finds it, without
    importing shutil (it loads the compression modules)."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            columns = 0
    return columns or 80


def main() -> None:
    args = sys.argv[1:]
    if args == ["--version"]:
        from verl_bundle import __version__

        sys.stdout.write(f"verl-bundle {__version__}\n")
        sys.exit(0)
    # click wraps help at min(terminal width, 80) - 2: the stored text is for 80 or more.
    if args in (["--help"], ["-h"]) and _columns() >= 80:
        from verl_bundle.cli.helptext import TOP

        sys.stdout.write(TOP)
        sys.exit(0)
    from verl_bundle.cli.main import main as run

    run(args)


if __name__ == "__main__":
    main()
