"""The environment already at the prefix (a rerun, --repair, a node's doctor): what sits in its
site directories that no RECORD lists and came after the install made it, and the links there
that leave it (doctor/unlisted.py). A warning, never a failure: the doctor runs before
`install.sh --repair`, which removes them."""

from __future__ import annotations

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.doctor.facts import Facts
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok
from verl_bundle.airgap.doctor.unlisted import REPAIR, SHOWN


@check("unlisted", generic=True)
def check_unlisted(plan: Plan, facts: Facts, opts: Options) -> Check:
    strays = facts.node.unlisted
    if strays is None:
        return ok("no environment at the prefix yet")
    if not strays:
        return ok("every entry of the site directories is listed in a RECORD")
    more = f"; and {len(strays) - SHOWN} more" if len(strays) > SHOWN else ""
    return found(
        "warn",
        f"{len(strays)} not installed by the bundle: {'; '.join(strays[:SHOWN])}{more}",
        "a .pth file or sitecustomize no RECORD lists runs whenever the environment's python "
        "starts; a link leaving the prefix makes a reinstall write outside it",
        REPAIR,
    )
