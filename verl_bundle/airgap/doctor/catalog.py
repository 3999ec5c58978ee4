"""Which checks the doctor runs, and in what order: an explicit list of its domain modules.

Each domain module marks its checks with `@check` (the one registry, airgap/checks.py); the report runs them domain by
domain in this order, each module's in the order it defines them. A check in a module that is
not listed here never runs, so a test walks doctor/ and proves every marked check is listed.
"""

from __future__ import annotations

from verl_bundle.airgap.checks import Registered, collect
from verl_bundle.airgap.doctor import (
    compilers,
    cuda,
    environment,
    gpus,
    python,
    ray,
    resources,
    system,
)

DOMAINS = (system, python, compilers, cuda, gpus, resources, environment, ray)


def registered() -> tuple[Registered, ...]:
    """Every check, in the report's order."""
    return collect(DOMAINS)
