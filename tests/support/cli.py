"""Running the CLI in-process, as a user would from a terminal of fixed width."""

from __future__ import annotations

import sys
from dataclasses import dataclass

import pytest

from verl_bundle.cli.main import main


@dataclass
class Result:
    code: int
    out: str
    err: str

    @property
    def last_line(self) -> str:
        lines = self.out.strip().splitlines()
        return lines[-1] if lines else ""


def run(args: list[str], capsys: pytest.CaptureFixture[str]) -> Result:
    old = sys.argv
    sys.argv = ["verl-bundle", *args]
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old
    captured = capsys.readouterr()
    return Result(code, captured.out, captured.err)
