"""The bundle a benchmark measures: the synthetic stack built once, untimed, in a fresh work
directory, and (where a benchmark installs from it) extracted. install, nodes, startup and
verify share this set-up. Its own module, not harness.py: the build is bench/cold_build's,
which imports harness.
"""

from __future__ import annotations

import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from bench import harness, synthetic
from bench.cold_build import build_once
from bench.harness import Options


@dataclass(frozen=True)
class Built:
    """A built bundle: its stack, the benchmark's work directory and command log, the tarball."""

    stack: synthetic.Stack
    work: Path
    log: Path
    tarball: Path

    def extract(self, wheels: bool = True) -> Path:
        """Extract the tarball into work/x (without its wheels when `wheels` is false) and
        remove the build's output; the bundle's directory."""
        with tarfile.open(self.tarball) as tf:
            members = [m for m in tf.getmembers() if wheels or "/wheels/" not in m.name]
            tf.extractall(self.work / "x", members=members, filter="data")
        harness.remove(self.tarball.parent)
        return next((self.work / "x").iterdir())


@contextmanager
def built_bundle(
    bench: str, opts: Options, progress: TextIO | None, size: int | None = None
) -> Iterator[Built]:
    """The stack of `size` (default --size) built into a work directory named for `bench`,
    removed afterwards unless --keep."""
    stack = synthetic.stack(opts.size if size is None else size, opts.cache, progress)
    with harness.workdir(bench, opts.keep, progress) as work:
        log = work / "commands.log"
        yield Built(stack, work, log, build_once(stack, work, log))
