"""`verl-bundle slurm install`: an sbatch script from templates/slurm-install.sbatch.j2. It
copies the tarball to every node (sbcast --compress, from the batch node's view of the path),
or reads it from a shared path, or has each node fetch a served copy; installs and runs the
doctor on every node (srun --ntasks-per-node=1); writes one result per node and the run's
record into one directory for `verl-bundle fleet report`; fails the job when any node failed.
The Ray launch script is slurm_ray.py."""

from __future__ import annotations

import hashlib
import os
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.airgap.doctor.node import run_var_patterns
from verl_bundle.cluster import values
from verl_bundle.errors import UsageError

SUMS = "SHA256SUMS"


@dataclass(frozen=True)
class SlurmInstall:
    tarball: Path  # as the submitting host sees it
    output: Path  # the sbatch script to write
    gather: Path  # where each node's result lands (a directory every node can write)
    prefix: str  # the venv on each node; %n is the node's name
    nodes: int = 2
    shared_path: Path | None = None  # the tarball (or extracted bundle) on a shared filesystem
    no_network: bool = False  # each node's install and doctor run under `unshare -n`
    python: str = ""  # the Python each node's venv is made from (default: install.sh's choice)
    from_url: str = ""  # a served, extracted bundle each node installs from (install.sh --from)
    bundle_sha256: str = ""  # with from_url: the sha256 of the bundle's SHA256SUMS, its pin
    install: values.InstallOptions = values.NO_OPTIONS  # passed to every node's install.sh


@dataclass(frozen=True)
class Written:
    script: Path
    submit: str  # the command that submits it


def bundle_id_of_tarball(tarball: Path, name: str) -> str:
    """sha256 of the bundle's SHA256SUMS (every file's hash, so the bundle's identity): the
    first member of that name, found by its header (it follows a built bundle's files; the
    headers of a plain tar are read by seeking past each member); '' when there is none."""
    try:
        with tarfile.open(tarball) as tf:
            for member in tf:
                if member.isfile() and member.name == f"{name}/{SUMS}":
                    fh = tf.extractfile(member)
                    return hashlib.sha256(fh.read()).hexdigest() if fh else ""
    except (OSError, tarfile.TarError):
        return ""
    return ""


def bundle_id_of_dir(bundle: Path) -> str:
    try:
        return hashlib.sha256((bundle / SUMS).read_bytes()).hexdigest()
    except OSError:
        return ""


def pinned(bundle: str, where: Path, lacks: str) -> str:
    """`bundle` (the id of a tarball or directory), refused in one line when there is none: the
    nodes check it before they install, so a script is never written without it."""
    if not bundle:
        raise UsageError(
            f"{where}: {lacks}: not a bundle `verl-bundle build` wrote (its identity, the sha256 "
            f"of {SUMS}, is what each node checks before it installs)"
        )
    return bundle


def _source(req: SlurmInstall) -> tuple[str, str, str, str]:
    """(mode, source path, bundle name, bundle id) for the request, each checked; the id is
    '' only for an unpinned served bundle."""
    if req.from_url:
        url = values.url_value(req.from_url.rstrip("/"), "--from-url")
        if req.no_network:
            raise UsageError("--from-url needs the network; leave out --no-network")
        pin = values.pin_value(req.bundle_sha256) if req.bundle_sha256 else ""
        return "url", "", values.served_name(url), pin
    if req.bundle_sha256:
        raise UsageError("--bundle-sha256 pins a served bundle: give it with --from-url")
    if req.shared_path is not None:
        shared = Path(values.path_value(req.shared_path.absolute(), "--shared-path"))
        if shared.is_dir():
            name = values.plain_name(shared.name, "--shared-path: its directory name")
            return (
                "shared-dir",
                str(shared),
                name,
                pinned(bundle_id_of_dir(shared), shared, f"no {SUMS} in it"),
            )
        if not shared.is_file():
            raise UsageError(f"--shared-path {shared}: no such tarball or bundle directory")
        name = values.tarball_name(shared)
        return (
            "shared-tar",
            str(shared),
            name,
            pinned(
                bundle_id_of_tarball(shared, name),
                shared,
                f"no {name}/{SUMS} in it",
            ),
        )
    tarball = Path(values.path_value(req.tarball.absolute(), "the tarball"))
    if not tarball.is_file():
        raise UsageError(f"{req.tarball}: no such tarball")
    name = values.tarball_name(tarball)
    return (
        "sbcast",
        str(tarball),
        name,
        pinned(
            bundle_id_of_tarball(tarball, name),
            tarball,
            f"no {name}/{SUMS} in it",
        ),
    )


def write_script(output: Path, text: str, secret: bool) -> None:
    """The script, whole or not at all; readable by its owner only when it holds a password."""
    tmp = output.with_name(f".{output.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.chmod(0o700 if secret else 0o755)
    tmp.replace(output)


def write_install(req: SlurmInstall) -> Written:
    if req.nodes < 1:
        raise UsageError(f"--nodes {req.nodes}: give at least 1")
    mode, source, name, bundle = _source(req)
    gather = values.path_value(req.gather.absolute(), "--gather")
    text = values.render(
        "slurm-install.sbatch.j2",
        {
            "name": name,
            "script": values.path_value(req.output, "--output"),
            "nodes": req.nodes,
            "gather": gather,
            "prefix": values.path_value(req.prefix, "--prefix"),
            "mode": mode,
            "source": source,
            "bundle": bundle,
            "python": values.path_value(req.python, "--python") if req.python else "",
            "no_network": "1" if req.no_network else "",
            "install_args": " ".join(req.install.argv()),
            "from_url": req.from_url.rstrip("/"),
            "reporter": values.path_value(sys.executable, "this Python"),
            "run_vars": run_var_patterns()[0],
            "secrets": run_var_patterns()[1],
        },
    )
    # Slurm opens the job's output file there before the script runs: it must exist.
    req.gather.mkdir(parents=True, exist_ok=True)
    write_script(req.output, text, values.has_credentials(req.from_url))
    return Written(req.output, f"sbatch --wait {values.sh_quote(req.output)}")
