"""Everything the checks read about this machine, gathered once into one frozen `Facts`.

The probes run side by side, so a hung driver or tool costs one timeout, not several. Checks
never probe: a test builds `Facts` by hand to put a check in any state."""

from __future__ import annotations

import os
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from verl_bundle.airgap.doctor.commands import Run
from verl_bundle.airgap.doctor.compilers import Compiler, Ninja, probe_compilers, probe_ninja
from verl_bundle.airgap.doctor.gpus import DriverProbe, GpuListing, list_gpus, probe_driver
from verl_bundle.airgap.doctor.node import Node, probe_node
from verl_bundle.airgap.doctor.python import (
    Interpreter,
    ServerPython,
    bundled_mark,
    probe_python,
    probe_server_pythons,
)
from verl_bundle.airgap.doctor.resources import Memory, Place, probe_disk, probe_memory
from verl_bundle.airgap.doctor.system import Distro, System, read_distro, read_system
from verl_bundle.airgap.doctor.toolkit import Toolkit, find_toolkit, read_ldconfig


@dataclass(frozen=True)
class Facts:
    distro: Distro
    system: System
    python: Interpreter  # the interpreter the venv will be made from
    compilers: tuple[Compiler, ...]  # C ($CC or gcc), then C++ ($CXX or g++)
    ninja: Ninja
    toolkit: Toolkit
    ldcache: Run  # `ldconfig -p`
    gpus: GpuListing
    driver: DriverProbe
    memory: Memory
    disk: tuple[Place, ...]  # the install prefix, the temp dir
    env: Mapping[str, str]  # the environment, as it was when gathered
    node: Node = field(default_factory=Node)  # for the fleet report: facts no check reads
    # python3 and python3.X on PATH; asked only when the venv's Python is the bundled one (the
    # python check then says whether the server's own would have done)
    server_pythons: tuple[ServerPython, ...] = ()


def gather(python: str | None = None, prefix: str | None = None, deep: bool = False) -> Facts:
    """Probe this machine: `python` is the interpreter the venv will use (default: this one),
    `prefix` where it will go (default: the current directory); `deep` hashes every installed
    file for the environment fingerprint (node.py)."""
    env = MappingProxyType(dict(os.environ))
    python = python or sys.executable
    with ThreadPoolExecutor(max_workers=9) as pool:
        node = pool.submit(probe_node, env, prefix, deep)  # MASTER_ADDR's lookup may take a while
        py = pool.submit(probe_python, python)
        toolkit = pool.submit(find_toolkit, env)
        ldcache = pool.submit(read_ldconfig)
        listing = pool.submit(list_gpus)
        driver = pool.submit(probe_driver)
        compilers = pool.submit(probe_compilers, env)
        ninja = pool.submit(probe_ninja)
        pythons = pool.submit(probe_server_pythons) if bundled_mark(python) else None
        return Facts(
            distro=read_distro(),
            system=read_system(),
            python=py.result(),
            compilers=compilers.result(),
            ninja=ninja.result(),
            toolkit=toolkit.result(),
            ldcache=ldcache.result(),
            gpus=listing.result(),
            driver=driver.result(),
            memory=probe_memory(),
            disk=probe_disk(prefix),
            env=env,
            node=node.result(),
            server_pythons=pythons.result() if pythons else (),
        )
