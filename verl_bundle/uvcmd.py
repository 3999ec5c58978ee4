"""Running uv (the resolver and builder) with no configuration but what we hand it."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.credentials import Redactor
from verl_bundle.errors import BundleError

# uv reads many UV_* variables that would change what resolves (extra indexes, constraints,
# a cut-off, a torch backend). Only these, which change how it talks to the network or where it
# caches, are let through; proxies, SSL_CERT_FILE and the like are not UV_* and pass as they are.
_KEEP_UV_VARS = {
    "UV_CACHE_DIR",
    "UV_NATIVE_TLS",
    "UV_HTTP_TIMEOUT",
    "UV_HTTP_RETRIES",
    "UV_CONCURRENT_DOWNLOADS",
}


def uv_binary() -> str:
    try:
        from uv import find_uv_bin
    except ImportError:  # pragma: no cover - uv is a dependency
        raise BundleError(
            "uv, the resolver, is not installed; reinstall verl-bundle from its clone (pip install .)"
        ) from None
    return str(find_uv_bin())


def uv_env(config_home: Path) -> dict[str, str]:
    """The environment uv runs in: no user/system uv.toml, no stray UV_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UV_") or k in _KEEP_UV_VARS}
    # XDG dirs point at an empty directory so that ~/.config/uv/uv.toml and /etc/uv/uv.toml,
    # which could add indexes, are not read.
    env["XDG_CONFIG_HOME"] = str(config_home)
    env["XDG_CONFIG_DIRS"] = str(config_home)
    env["UV_PYTHON_DOWNLOADS"] = "never"
    env["UV_NO_PROGRESS"] = "1"
    # uv honours SSL_CERT_FILE, not REQUESTS_CA_BUNDLE; pass the requests setting on.
    ca = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if ca and "SSL_CERT_FILE" not in env:
        env["SSL_CERT_FILE"] = ca
    return env


@dataclass(frozen=True)
class UvRun:
    returncode: int
    stdout: str
    stderr: str


def run_uv(
    args: list[str],
    cwd: Path,
    redact: Redactor,
    timeout: float = 1800,
    extra_env: dict[str, str] | None = None,
) -> UvRun:
    config_home = cwd / ".uv-config"
    config_home.mkdir(exist_ok=True)
    try:
        proc = subprocess.run(
            [uv_binary(), *args],
            cwd=cwd,
            env={**uv_env(config_home), **(extra_env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise BundleError(
            f"uv {args[0]} did not finish in {int(timeout)} s; is an index hanging? "
            "check the mirror and HTTPS_PROXY"
        ) from None
    return UvRun(proc.returncode, redact(proc.stdout), redact(proc.stderr))


def host_python() -> str:
    """The interpreter uv uses to build metadata of sdists on this host."""
    return sys.executable
