"""The server program's exit codes and errors: one table, one exception root.

Every server command (install.sh, verify, doctor, postinstall, readiness, explain, assets,
preflight) exits with a code from `EXIT_CODES`, and every error a user can act on is a
`ServerError` whose class carries its code. The CLI (airgap/cli.py) is the one place that
catches them: it prints the message and the verdict, and exits with the code. The host CLI
(`verl-bundle rehearse`, `verl-bundle doctor`) uses the same table.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_DAMAGED = 3
EXIT_SERVER = 4
EXIT_NOT_READY = 5
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143

# The one exit table: code -> what it means, as every --help and the README say it (a test keeps
# them equal), and what the last line of an install that stopped with it says (install.sh's
# verdict line, rehearse and the fleet report read the same words). "" where no install stops.
_TABLE = {
    EXIT_OK: (
        "ok: ready to train (install.sh, rehearse, postinstall, readiness), ready to install "
        "(doctor), intact (verify)",
        "",
    ),
    EXIT_FAILED: (
        "a step failed: a phase, a post-install check, a check that found a problem "
        "(run the same command again to continue)",
        "not installed: a step failed (above); run ./install.sh again to continue",
    ),
    EXIT_USAGE: (
        "usage error: a bad option, or a path that is not what the command needs",
        "nothing was done: a usage error (above)",
    ),
    EXIT_DAMAGED: (
        "the bundle is damaged: a file does not match SHA256SUMS or the manifest",
        "not installed: the bundle is damaged or refused (above)",
    ),
    EXIT_SERVER: (
        "this server cannot install the bundle yet: wrong Python, or the doctor found "
        "a failure (each with its fix)",
        "not installed: this server is not ready (above, each with its fix)",
    ),
    EXIT_NOT_READY: (
        "installed as bundled, but not ready to train: a phase left out, the "
        "profile's known limit, no GPU under --require-gpu, or the trainer cannot start (the "
        "last line says which)",
        "installed, but not ready to train (above)",
    ),
    EXIT_INTERRUPTED: (
        "interrupted (run the same command again to continue)",
        "not installed: interrupted; run ./install.sh again to continue",
    ),
    EXIT_TERMINATED: (
        "terminated by SIGTERM (a scheduler's time limit, `timeout`): run the same "
        "command again to continue",
        "not installed: terminated; run ./install.sh again to continue",
    ),
}
EXIT_CODES = {code: meaning for code, (meaning, _) in _TABLE.items()}


def stopped(code: int) -> str:
    """The last line of an install that stopped with `code` (an unknown code reads as a failed
    step: never as success)."""
    return _TABLE.get(code, _TABLE[EXIT_FAILED])[1] or _TABLE[EXIT_FAILED][1]


def meaning(code: int) -> str:
    """What `code` means, in the table's words (an unknown code: said as such)."""
    found = _TABLE.get(code)
    return found[0] if found else f"exit {code}: not one of verl-bundle's codes"


def exit_table(indent: str = "  ") -> str:
    """The exit codes as `--help` prints them."""
    return "\n".join(f"{indent}{code:<3} {text}" for code, text in EXIT_CODES.items())


class ServerError(Exception):
    """An error the user can act on: one message (what, where, what to do) and its exit code."""

    code = EXIT_FAILED

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code

    def __str__(self) -> str:
        return self.message


class UsageError(ServerError):
    """The command line is wrong; nothing was attempted."""

    code = EXIT_USAGE


class DamagedError(ServerError):
    """A bundle file does not match its lists, or a list cannot be read."""

    code = EXIT_DAMAGED


class ServerNotReadyError(ServerError):
    """This server cannot install the bundle yet (wrong Python, doctor failures)."""

    code = EXIT_SERVER


class StepError(ServerError):
    """A step of the work failed (a phase, a check that could not run); run again to continue."""

    code = EXIT_FAILED


class InterruptError(ServerError):
    """Ctrl-C or SIGTERM: the message says where, and that a rerun continues."""

    code = EXIT_INTERRUPTED
