"""The one exception family a user sees: each message says what failed, where, and what to do.

The exit codes are the server program's one table (airgap/errors.py), so that `verl-bundle
rehearse` and `./install.sh` end with the same code for the same verdict."""

from __future__ import annotations

from verl_bundle.airgap.errors import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_READY,
    EXIT_OK,
    EXIT_SERVER,
    EXIT_TERMINATED,
    EXIT_USAGE,
)

__all__ = [
    "EXIT_DAMAGED",
    "EXIT_FAILED",
    "EXIT_INTERRUPTED",
    "EXIT_NOT_READY",
    "EXIT_OK",
    "EXIT_SERVER",
    "EXIT_TERMINATED",
    "EXIT_USAGE",
    "AssembleError",
    "BundleError",
    "DamagedError",
    "FetchError",
    "HostBuildError",
    "LockError",
    "ProfileError",
    "ResolutionError",
    "Terminated",
    "UsageError",
]


class BundleError(Exception):
    """Base for every error the CLI reports as one line (no traceback)."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class Terminated(BaseException):
    """SIGTERM arrived (from `timeout`, a batch scheduler, systemd) while a host compile ran:
    the build unwinds as for Ctrl-C (the compile stopped whole, its work directory kept) and
    exits 143. A BaseException, as KeyboardInterrupt is, so that no `except Exception` takes it."""

    exit_code = EXIT_TERMINATED


class UsageError(BundleError):
    """The command line or an input file is wrong; nothing was attempted."""

    exit_code = EXIT_USAGE


class DamagedError(BundleError):
    """A written bundle is damaged or not the one that was built (a tarball cut short, a
    member named twice): exit 3, as the server's verify says of it."""

    exit_code = EXIT_DAMAGED


class ProfileError(UsageError):
    """A profile file is not valid: names the file, the key and what is expected."""


class LockError(UsageError):
    """A lock file is not valid or does not belong to the profile/target asked for."""


class ResolutionError(BundleError):
    """The resolver could not produce a lock for the profile on this target."""


class FetchError(BundleError):
    """A file could not be downloaded or did not match its recorded hash."""


class HostBuildError(BundleError):
    """A pure-Python sdist could not be turned into a wheel on the online host."""


class AssembleError(BundleError):
    """The bundle could not be written."""
