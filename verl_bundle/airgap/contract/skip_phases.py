"""`--skip-phase NAME`, one value for every surface: the phases an install leaves out, named as
the bundle's manifest names them. install.sh, the doctor, post-install, readiness, rehearse and
the cluster scripts (slurm install, ansible install) all take it as `skip_phases` and check it
here, with one message: what is wrong, the bundle's phase names, exit 2.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import re
from typing import Iterable, Sequence, Tuple

from verl_bundle.airgap.errors import UsageError

# A phase name as a command line carries it (one shell word): what every built-in profile's
# phases are, and what a cluster script may pass on before the bundle is at hand.
PHASE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")

SkipPhases = Tuple[str, ...]


def skip_phases(names: Iterable[str], phases: Sequence[str] | None) -> SkipPhases:
    """`names` (each --skip-phase, in the order given, each once) checked against `phases`,
    the bundle's phase names in install order; None where the bundle is not at hand yet (a
    cluster script for a tarball given later): then only that each is a phase name. A name
    that fails is a UsageError (exit 2) naming it and the phases there are."""
    out: list[str] = []
    for name in names:
        plain = PHASE_NAME.fullmatch(name) is not None
        if plain and (phases is None or name in phases):
            if name not in out:
                out.append(name)
            continue
        shown = name if plain else repr(name[:40])
        if phases is None:
            raise UsageError(
                f"--skip-phase {shown}: not a phase name (letters, digits, '.', '_', '-'; the "
                "bundle's phases are in `verl-bundle profiles show NAME`)"
            )
        raise UsageError(
            f"--skip-phase {shown}: the bundle has no such phase; its phases are "
            f"{', '.join(phases) or '(none)'}"
        )
    return tuple(out)
