"""`verl-bundle ansible install`: a playbook from templates/ansible-install.yml.j2 for sites
without Slurm. It copies the tarball from the controller (or fetches it from an intranet URL),
installs and runs the doctor on every inventory host, and gathers each host's JSON on the
controller for `verl-bundle fleet report`. Per-host settings are inventory variables."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from verl_bundle.cluster.slurm import Written, bundle_name, render, served_url
from verl_bundle.errors import UsageError


@dataclass(frozen=True)
class AnsibleInstall:
    tarball: Path  # on the controller
    output: Path  # the playbook to write
    gather: Path  # on the controller: one <host>.json each
    prefix: str = "/opt/verl"  # the default venv (verl_prefix per host overrides it)
    hosts: str = "all"
    url: str = ""  # fetch from here instead of copying from the controller
    from_url: str = ""  # a served, extracted bundle each host installs from (install.sh --from)


def write_playbook(req: AnsibleInstall) -> Written:
    if req.from_url:
        served_url(req.from_url)
        name = req.from_url.rstrip("/").rsplit("/", 1)[-1]
    elif not req.tarball.is_file():
        raise UsageError(f"{req.tarball}: no such tarball")
    else:
        name = bundle_name(req.tarball)
    text = render(
        "ansible-install.yml.j2",
        {
            "name": name,
            "from_url": req.from_url.rstrip("/"),
            "playbook": req.output,
            "hosts": req.hosts,
            "tarball": str(req.tarball.absolute()),
            "url": req.url,
            "gather": str(req.gather.absolute()),
            "prefix": req.prefix,
        },
    )
    req.gather.mkdir(parents=True, exist_ok=True)
    req.output.write_text(text, encoding="utf-8")
    return Written(req.output, f"ansible-playbook -i INVENTORY {req.output}")
