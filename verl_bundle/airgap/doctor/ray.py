"""Ray on this node: a token an earlier ray.init() left in ~/.ray/auth_token, which turns a
head's token authentication on where the workers have none (node.py finds it; preflight says
the same, as a failure for a launch of more than one node)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.doctor.node import ray_token_finding
from verl_bundle.airgap.doctor.registry import Options, Plan, found

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts


@check("ray-token", generic=True)
def check_ray_token(plan: Plan, facts: Facts, opts: Options) -> Check:
    status, summary, fix = ray_token_finding(facts.node.ray_token, facts.env)
    return found(status, summary, "", fix)
