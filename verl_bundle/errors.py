"""The host's errors, in the one exception family of both sides: every error a user can act on
is a `ServerError` (airgap/errors.py: one message saying what failed, where and what to do, and
its exit code as `.code`, from the one table there). The host's own (`BundleError` and below)
derive from it, and a usage error is the same class on both sides, so the host CLI catches one
root and `verl-bundle rehearse` and `./install.sh` end with the same code for the same verdict."""

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
    ServerError,
    UsageError,
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
    "ServerError",
    "Terminated",
    "UsageError",
]


class BundleError(ServerError):
    """A host step that failed (resolve, fetch, build, assemble): one line, no traceback."""

    code = EXIT_FAILED

    def __init__(self, message: str) -> None:
        super().__init__(message)


class Terminated(BaseException):
    """SIGTERM arrived (from `timeout`, a batch scheduler, systemd) while a host compile ran:
    the build unwinds as for Ctrl-C (the compile stopped whole, its work directory kept) and
    exits 143. A BaseException, as KeyboardInterrupt is, so that no `except Exception` takes it."""

    code = EXIT_TERMINATED


class DamagedError(BundleError):
    """A written bundle is damaged or not the one that was built (a tarball cut short, a
    member named twice): exit 3, as the server's verify says of it."""

    code = EXIT_DAMAGED


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
