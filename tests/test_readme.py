"""The README's command tables name every option each command really takes (its --help), on
the host (`verl-bundle ...`) and on the server (`./doctor`, `./install.sh`)."""

from __future__ import annotations

import contextlib
import io
import re

import pytest
from cli import run
from conftest import ROOT

from verl_bundle.airgap import doctor
from verl_bundle.airgap.install.options import usage

README = (ROOT / "README.md").read_text(encoding="utf-8")
OPTION = re.compile(r"^\s+(?:(-\w), )?(--[a-z][a-z-]*)", re.M)


def row(start: str) -> str:
    """The README table row that begins with `start` (in backticks)."""
    found = [line for line in README.splitlines() if line.startswith(f"| `{start}")]
    assert len(found) == 1, f"README: {len(found)} rows for {start!r}"
    return found[0]


def options(help_text: str) -> dict[str, str]:
    """--long -> its short form ("" when none), for every option but --help (read from the
    options section only: the description may quote another command's option)."""
    listed = re.split(r"^options:$", help_text, maxsplit=1, flags=re.M | re.I)[-1]
    return {long: short for short, long in OPTION.findall(listed) if long != "--help"}


def missing(wanted: dict[str, str], text: str) -> list[str]:
    """The options named neither by their long nor their short form (`-o DIR`) in `text`."""
    named = [o for o, short in wanted.items() if o in text or (short and f"{short} " in text)]
    return sorted(set(wanted) - set(named))


@pytest.mark.parametrize(
    "command",
    ["build", "lock", "verify", "rehearse", "doctor", "explain", "toolchain", "assets"],
)
def test_each_host_command_row_names_its_options(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run([command, "--help"], capsys)
    assert result.code == 0
    wanted = options(result.out)
    assert wanted, result.out  # the parse found the options at all
    line = row(f"verl-bundle {command} ")
    assert missing(wanted, line) == []


def test_the_bundle_doctor_row_names_its_options() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        doctor.main(["--help"])
    wanted = options(out.getvalue())
    del wanted["--bundle"]  # ./doctor passes its own bundle
    assert "--skip-phase" in wanted
    line = row("doctor` |")
    assert missing(wanted, line) == []


def test_the_install_synopsis_names_every_option() -> None:
    wanted = options(usage(None))
    assert "--skip-phase" in wanted and "--into-env" in wanted
    start = README.index("    ./install.sh [--prefix DIR]")
    synopsis = README[start : README.index("\n\n", start)]
    assert missing(wanted, synopsis) == []
