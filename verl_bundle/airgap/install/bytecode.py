"""The bundle's code runs from its source only; the interpreter's own modules from their
bytecode.

The tools start with `-B` and `sys.pycache_prefix` pointing nowhere, so that no .pyc is ever
read from or written to the bundle (a planted lib/**/__pycache__/*.pyc must never replace the
code SHA256SUMS vouches for). But a prefix that points nowhere also makes the interpreter
compile every standard-library module it imports from source, each run (about 0.4 s of CPU
per process). `switch()` keeps the first and drops the second: modules under lib/ are found
by a finder that loads .py files only and never asks for bytecode, and the prefix is reset so
everything else loads as usual (still nothing written: -B). A tool calls it first thing.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import SOURCE_SUFFIXES, FileFinder, SourceFileLoader

# Nothing else is imported before `switch()`: every standard-library module loaded until then
# is compiled from source (typing alone pulls in re, enum and functools: 0.2-0.9 s of CPU on a
# busy 2-core host, in every server process). mypy reads this block; Python never runs it.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable


class SourceLoader(SourceFileLoader):
    """Compiles from the .py file every time: with no stats for the source, the loader never
    looks for its bytecode."""

    def path_stats(self, path: str) -> Any:
        raise OSError("bytecode is never read for the bundle's code")


def _hook(root: str) -> Callable[[str], FileFinder]:
    def finder(path: str) -> FileFinder:
        full = os.path.abspath(path)
        if full == root or full.startswith(root + os.sep):
            return FileFinder(path, (SourceLoader, SOURCE_SUFFIXES))
        raise ImportError("not the bundle's code")

    return finder


NOWHERE = "/dev/null/none"  # the pycache prefix the tools start with
# The directory that holds verl_bundle/: the bundle's lib/.
LIB = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def switch() -> None:
    """Started as a bundle tool (the prefix points nowhere): from now on, modules under lib/
    load from .py only and other modules from their usual bytecode. Otherwise nothing."""
    if sys.pycache_prefix == NOWHERE:
        source_only(LIB)


def source_only(lib: str) -> None:
    """Modules under `lib` load from .py only; other modules from their usual bytecode (the
    prefix that hid it is reset)."""
    root = os.path.abspath(lib)
    sys.path_hooks.insert(0, _hook(root))
    for entry in list(sys.path_importer_cache):
        full = os.path.abspath(entry) if entry else entry
        if full == root or full.startswith(root + os.sep):
            del sys.path_importer_cache[entry]
    sys.pycache_prefix = None
