"""The shared render pieces: the JSON envelope, terminal-safe text, the checks table."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from verl_bundle.airgap import render
from verl_bundle.airgap.doctor import Check


def test_envelope_is_versioned() -> None:
    doc = json.loads(render.dumps(render.envelope("verify", False, {"checked": 3})))
    assert doc == {"schema": 1, "command": "verify", "ok": False, "result": {"checked": 3}}


def test_printable_neutralises_control_sequences() -> None:
    text = "a \x1b[31mred\x1b[0m \x1b]0;owned\x07 \x1b[2J\x1b[H x\r\ny\rz \u202etxt \x00\x9b"
    shown = render.printable(text)
    assert shown == ("a red \\x1b]0;owned\\x07 \\x1b[2J\\x1b[H x\ny\\x0dz \\u202etxt \\x00\\x9b")
    assert "\t" in render.printable("a\tb\n") and "\n" in render.printable("a\tb\n")
    # Every character left is printable, or a tab or a newline.
    assert all(c.isprintable() or c in "\t\n" for c in shown)


def test_printable_is_linear_on_a_long_hostile_line() -> None:
    line = "\x1b[" * 400_000 + "\x1b]0;" * 100_000
    shown = render.printable(line)
    assert "\x1b" not in shown and shown.count("\\x1b") == 500_000


def test_checks_table_shows_problems_with_their_fixes() -> None:
    rows = [
        Check("python", "ok", "Python 3.10.12"),
        Check("nvcc", "warn", "nvcc 13.0, the bundle needs 11.8", "found at\n/usr/bin/nvcc", "x"),
        Check("gcc", "fail", "gcc 13 is too new", "", "install gcc-11"),
    ]
    text = render.checks_text(rows, "doctor: NOT ready")
    assert text.splitlines()[:3] == [
        "ok    python  Python 3.10.12",
        "WARN  nvcc    nvcc 13.0, the bundle needs 11.8",
        "FAIL  gcc     gcc 13 is too new",
    ]
    assert "  found at\n  /usr/bin/nvcc\n  fix: x" in text
    assert "FAIL gcc: gcc 13 is too new\n  fix: install gcc-11" in text
    # The counts, then the verdict as the very last line.
    assert text.splitlines()[-2:] == ["checks: 1 failure(s), 1 warning(s)", "doctor: NOT ready"]
    # One Check type for every surface: post-install findings render through the same table.
    post = [Check("torch", "fail", "torch 2.1.0, expected 2.1.2", fix="reinstall the bundle")]
    assert "fix: reinstall the bundle" in render.checks_text(post)
    assert render.checks_json(post) == [
        {
            "id": "torch",
            "status": "fail",
            "summary": "torch 2.1.0, expected 2.1.2",
            "detail": "",
            "fix": "reinstall the bundle",
            "subject": "",
        }
    ]
    # What could not be tested here is never shown as ok.
    shown = render.checks_text([Check("import:r", "untested", "needs a GPU", fix="on a GPU")])
    assert shown.startswith("UNTESTED  import:r") and "fix: on a GPU" in shown


PY38 = Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python3.8"


@pytest.mark.skipif(not PY38.exists(), reason="Python 3.8 (the oldest server python) is missing")
def test_the_render_path_runs_on_python38() -> None:
    """Server tools render through airgap/render.py on the server's python3, which may be 3.8."""
    lib = Path(render.__file__).parents[2]
    code = (
        "from verl_bundle.airgap import render as r\n"
        "from verl_bundle.airgap.checks import Check\n"
        "print(r.checks_text([Check('gcc', 'fail', 'too new', fix='use gcc-11')], 'doctor: NOT ready'))\n"
        "print(r.dumps(r.envelope('doctor', False, r.printable('\\x1b]0;t\\x07'))))"
    )
    proc = subprocess.run(
        [str(PY38), "-I", "-c", f"import sys; sys.path.insert(0, {str(lib)!r})\n{code}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "FAIL gcc: too new\n  fix: use gcc-11" in proc.stdout
    assert "checks: 1 failure(s), 0 warning(s)\ndoctor: NOT ready" in proc.stdout
    assert '"result": "\\\\x1b]0;t\\\\x07"' in proc.stdout
