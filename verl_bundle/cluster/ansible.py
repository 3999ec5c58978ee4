"""`verl-bundle ansible install`: a playbook from templates/ansible-install.yml.j2 for sites
without Slurm. Each host gets its copy of the bundle by copy from the controller, by fetching
the tarball from an intranet URL (checked against its sha256), or by installing from one served
copy (install.sh --from); copies live in a work directory of ours keyed by the bundle's
sha256, so a rebuilt tarball is installed again and an installed one is only checked. Each
host's result and the run's record are gathered on the controller for `fleet report`."""

from __future__ import annotations

import hashlib
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.airgap.doctor.node import run_var_regexes
from verl_bundle.cluster import values
from verl_bundle.cluster.slurm import SUMS, Written, bundle_id_of_tarball, pinned
from verl_bundle.errors import UsageError


@dataclass(frozen=True)
class AnsibleInstall:
    tarball: Path  # on the controller
    output: Path  # the playbook to write
    gather: Path  # on the controller: one <host>.json each
    prefix: str = "/opt/verl"  # the default venv (verl_prefix per host overrides it)
    hosts: str = "all"
    url: str = ""  # fetch the tarball from here instead of copying it from the controller
    from_url: str = ""  # a served, extracted bundle each host installs from (install.sh --from)
    serial: str = ""  # hosts per batch (a count or a percentage); '': all at once
    bundle_sha256: str = ""  # with from_url: the sha256 of the bundle's SHA256SUMS, its pin
    install: values.InstallOptions = values.NO_OPTIONS  # passed to every host's install.sh


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(4 << 20):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class Source:
    mode: str  # copy (from the controller), url (each host fetches the tarball) or served
    name: str
    tarball: str  # on the controller ('' when served)
    sha256: str  # url mode: the tarball's sha256, which get_url checks
    bundle: str  # the sha256 of the bundle's SHA256SUMS, each host's pin ('': served, unpinned)


def _source(req: AnsibleInstall) -> Source:
    """Where the hosts get the bundle, each value checked, and the bundle's identity when the
    playbook is written (each host checks it before it installs)."""
    if req.from_url:
        url = values.url_value(req.from_url.rstrip("/"), "--from-url")
        pin = values.pin_value(req.bundle_sha256) if req.bundle_sha256 else ""
        return Source("served", values.served_name(url), "", "", pin)
    if req.bundle_sha256:
        raise UsageError("--bundle-sha256 pins a served bundle: give it with --from-url")
    tarball = Path(values.path_value(req.tarball.absolute(), "the tarball"))
    if not tarball.is_file():
        raise UsageError(f"{req.tarball}: no such tarball")
    name = values.tarball_name(tarball)
    lacks = f"no {name}/{SUMS} in it"
    bundle = pinned(bundle_id_of_tarball(tarball, name), tarball, lacks)
    if not req.url:
        return Source("copy", name, str(tarball), "", bundle)
    values.url_value(req.url, "--url")
    return Source("url", name, str(tarball), _sha256(tarball), bundle)


def write_playbook(req: AnsibleInstall) -> Written:
    src = _source(req)
    text = values.render(
        "ansible-install.yml.j2",
        {
            "name": src.name,
            "mode": src.mode,
            "playbook": values.path_value(req.output, "--output"),
            "hosts": values.host_pattern(req.hosts),
            "serial": values.serial_value(req.serial),
            "tarball": src.tarball,
            "sha256": src.sha256,
            "url": req.url,
            "from_url": req.from_url.rstrip("/"),
            "pin": src.bundle,
            "gather": values.path_value(req.gather.absolute(), "--gather"),
            "prefix": values.path_value(req.prefix, "--prefix"),
            "reporter": values.path_value(sys.executable, "this Python"),
            "install_args": req.install.argv(),
            "run_vars": run_var_regexes()[0],
            "secrets": run_var_regexes()[1],
        },
    )
    req.gather.mkdir(parents=True, exist_ok=True)
    secret = values.has_credentials(req.url) or values.has_credentials(req.from_url)
    tmp = req.output.with_name(f".{req.output.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o600 if secret else 0o644)
    tmp.replace(req.output)
    return Written(req.output, f"ansible-playbook -i INVENTORY {values.sh_quote(req.output)}")
