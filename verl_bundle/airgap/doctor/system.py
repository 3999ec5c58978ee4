"""The operating system: distribution (which package command to suggest), architecture, glibc."""

from __future__ import annotations

import os
import platform
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from verl_bundle.airgap.checks import Check, check
from verl_bundle.airgap.doctor.registry import Options, Plan, found, ok
from verl_bundle.airgap.doctor.versions import older

if TYPE_CHECKING:
    from verl_bundle.airgap.doctor.facts import Facts

OS_RELEASE = ("/etc/os-release", "/usr/lib/os-release")
# Where an air-gapped server gets an OS package from.
FROM_MIRROR = "from the intranet OS package mirror or the install media"
_RHEL = {"rhel", "centos", "fedora", "rocky", "almalinux", "alma", "ol", "amzn"}


@dataclass(frozen=True)
class Distro:
    name: str
    family: str  # "apt", "dnf", "yum" or "" when unknown

    def command(self, apt: str, dnf: str) -> str:
        """The command that installs a package here."""
        if self.family == "apt":
            return f"apt-get install -y {apt}"
        if self.family in ("dnf", "yum"):
            return f"{self.family} install -y {dnf}"
        return f"install {apt} (Debian/Ubuntu) or {dnf} (RHEL/Fedora) with the package manager"

    def install(self, apt: str, dnf: str) -> str:
        """The command, and where an air-gapped server gets the package from."""
        return f"{self.command(apt, dnf)} ({FROM_MIRROR})"


@dataclass(frozen=True)
class System:
    name: str  # platform.system()
    arch: str  # normalised: x86_64, aarch64
    glibc: str | None
    kernel: str


def read_distro() -> Distro:
    fields: dict[str, str] = {}
    for name in OS_RELEASE:
        try:
            text = Path(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep:
                fields[key.strip()] = value.strip().strip("\"'")
        break
    ids = {fields.get("ID", "")} | set(fields.get("ID_LIKE", "").split())
    family = ""
    if ids & {"debian", "ubuntu"}:
        family = "apt"
    elif ids & _RHEL:
        family = "yum" if shutil.which("yum") and not shutil.which("dnf") else "dnf"
    return Distro(fields.get("PRETTY_NAME") or platform.system(), family)


def glibc_version() -> str | None:
    try:
        text = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        text = ""
    if text.startswith("glibc "):
        return text.split()[1]
    lib, version = platform.libc_ver()
    return version if lib == "glibc" and version else None


def norm_arch(arch: str) -> str:
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(arch.lower(), arch.lower())


def read_system() -> System:
    return System(
        platform.system(), norm_arch(platform.machine()), glibc_version(), platform.release()
    )


@check("os", generic=True)
def check_os(plan: Plan, facts: Facts, opts: Options) -> Check:
    s, distro = facts.system, facts.distro
    found_ = f"{s.name} {s.arch} ({distro.name}), glibc {s.glibc or 'not found'}"
    if s.name != "Linux":
        return found("fail", f"{found_}: this bundle is for Linux", "", "run it on a Linux server")
    if plan.arch and norm_arch(plan.arch) != s.arch:
        return found(
            "fail",
            f"{found_}: this bundle is for {plan.arch}",
            f"its wheels are built for {plan.arch} and cannot run on {s.arch}",
            f"build a bundle for this server's platform (verl-bundle build --platform ..._{s.arch})"
            " on the online host and carry it in",
        )
    if s.glibc is None:
        return found(
            "fail" if plan.glibc or plan.generic else "warn",
            f"{found_}: manylinux wheels need glibc" + (f" >= {plan.glibc}" if plan.glibc else ""),
            "no GNU C library was found (musl-based systems such as Alpine cannot load them)",
            "use a glibc-based distribution (Debian, Ubuntu, RHEL and its rebuilds)",
        )
    if plan.glibc and older(s.glibc, plan.glibc):
        return found(
            "fail",
            f"glibc {s.glibc} is older than the {plan.glibc} the bundle's wheels need",
            f"{found_}; a manylinux_{plan.glibc.replace('.', '_')} wheel will not load here",
            "build the bundle for this glibc on the online host (verl-bundle build --platform "
            f"manylinux_{s.glibc.replace('.', '_')}_{s.arch}) or upgrade the operating system",
        )
    need = f" >= {plan.glibc}" if plan.glibc else ""
    return ok(f"{s.name} {s.arch} ({distro.name}), glibc {s.glibc}{need}")
