"""What killed runs leave behind: temporary names that carry the pid of the process that made
them (a partial tarball, a compile's work directory). Such a leftover may be removed once that
process is gone; `alive` tells which."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (another user's process counts as running)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
