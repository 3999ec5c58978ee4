"""Upstream's project as a stack's source: verl's `pyproject.toml` and `uv.lock` read, the pins
its extras select (`uv export --frozen --offline`: uv evaluates the lock's forks and conflicts;
nothing is built or fetched) kept where their markers hold on the target, and `--from-lock`'s
profile (the lock's git sources as repositories --mirror can serve)."""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from verl_bundle.errors import ResolutionError, UsageError
from verl_bundle.net.download import Downloader
from verl_bundle.profile.model import Profile, UvLock
from verl_bundle.profile.sources import Git
from verl_bundle.profile.target import Target
from verl_bundle.uvcmd import run_uv

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# verl's rollout engines: its trainer config has no default (`rollout.name: ???`), so a stack
# taken from its lock must name one of these extras.
ROLLOUTS = ("vllm", "sglang")


@dataclass(frozen=True)
class Pin:
    """One package the extras select, as `uv export` writes it."""

    name: str
    version: str | None  # None for a git pin (its version is the lock's)
    git: Git | None = None


@dataclass(frozen=True)
class Project:
    """Upstream's pyproject.toml and uv.lock, read."""

    pyproject: Mapping[str, Any]
    lock: Mapping[str, Any]
    text: Mapping[str, bytes]  # the two files as they are, for `uv export`

    @property
    def indexes(self) -> dict[str, str]:
        """URL -> name of every `[[tool.uv.index]]` the pyproject declares."""
        found = self.pyproject.get("tool", {}).get("uv", {}).get("index", [])
        return {str(i["url"]).rstrip("/"): str(i["name"]) for i in found if "url" in i}

    @property
    def extras(self) -> tuple[str, ...]:
        table = self.pyproject.get("project", {}).get("optional-dependencies", {})
        return tuple(sorted(table))

    def overrides(self, target: Target, extras: Sequence[str]) -> tuple[str, ...]:
        """The lock's `[manifest] overrides` that apply on the target with these extras, as
        requirements ("numpy>=2.0.0"): the versions it took on purpose over a package's own."""
        found: list[str] = []
        for entry in self.lock.get("manifest", {}).get("overrides", []):
            spec = str(entry.get("specifier", ""))
            if not spec:
                continue  # an exclusion (a marker no machine meets), not a version
            marker = entry.get("marker")
            if marker:
                parsed = Requirement(f"{entry['name']} ; {marker}").marker
                asked = ["", *extras]
                if parsed is not None and not any(
                    parsed.evaluate(target.markers(e)) for e in asked
                ):
                    continue
            found.append(f"{canonicalize_name(str(entry['name']))}{spec}")
        return tuple(dict.fromkeys(found))

    def record(self, name: str, version: str | None) -> Mapping[str, Any] | None:
        for raw in self.lock.get("package", []):
            if canonicalize_name(raw["name"]) != name:
                continue
            if version is None or str(raw.get("version")) == version:
                return dict(raw)
        return None


def read_project(files: Mapping[str, bytes], where: str) -> Project:
    if "uv.lock" not in files or "pyproject.toml" not in files:
        raise UsageError(
            f"{where}: upstream's lock needs its uv.lock and the pyproject.toml beside it; "
            "give the directory (or checkout) that holds both"
        )
    try:
        pyproject = tomllib.loads(files["pyproject.toml"].decode("utf-8"))
        lock = tomllib.loads(files["uv.lock"].decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{where}: uv.lock or pyproject.toml is not valid TOML: {exc}") from None
    if not isinstance(lock.get("package"), list):
        raise UsageError(f"{where}/uv.lock: not a uv lock (no [[package]] tables)")
    return Project(pyproject, lock, dict(files))


def project_files(directory: Path) -> dict[str, bytes]:
    return {
        name: (directory / name).read_bytes()
        for name in ("pyproject.toml", "uv.lock")
        if (directory / name).is_file()
    }


def export(project: Project, extras: Sequence[str], where: str, downloader: Downloader) -> str:
    """The pins the extras select, as uv writes them (offline, from the lock alone)."""
    missing = [
        e for e in extras if canonicalize_name(e) not in map(canonicalize_name, project.extras)
    ]
    if missing:
        raise UsageError(
            f"{where}: extra {missing[0]!r} is not one of the project's: "
            + ", ".join(project.extras)
        )
    rollouts = [r for r in ROLLOUTS if r in project.extras]
    if rollouts and not any(canonicalize_name(e) in rollouts for e in extras):
        raise UsageError(
            f"{where}: verl's rollout has no default (actor_rollout_ref.rollout.name: ???): "
            f"add {' or '.join(f'--extra {r}' for r in rollouts)} (with --extra fsdp for the "
            "FSDP trainer)"
        )
    with tempfile.TemporaryDirectory(prefix="verl-bundle-uvlock-") as tmp:
        work = Path(tmp)
        for name, data in project.text.items():
            (work / name).write_bytes(data)
        args = [
            "export",
            "--project",
            str(work),
            "--offline",
            "--frozen",
            "--no-hashes",
            "--format",
            "requirements-txt",
            "--no-emit-project",
            "--no-annotate",
            "--no-header",
            "--quiet",
        ]
        for extra in extras:
            args += ["--extra", extra]
        run = run_uv(args, work, downloader.http.redact)
    if run.returncode != 0:
        lines = [line for line in run.stderr.splitlines() if line.strip()]
        said = next(
            (line for line in lines if line.startswith("error:")), lines[-1] if lines else ""
        )
        raise ResolutionError(
            f"{where}: uv could not read the lock for extras {', '.join(extras)}: "
            f"{said.removeprefix('error: ')}"
        )
    return run.stdout


def selected(exported: str, target: Target) -> list[Pin]:
    """The exported pins whose markers hold on the target."""
    pins: list[Pin] = []
    for line in exported.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "-")):
            continue
        try:
            req = Requirement(line)
        except InvalidRequirement as exc:
            raise ResolutionError(
                f"uv export wrote a line verl-bundle cannot read: {line!r} ({exc})"
            ) from None
        if req.marker is not None and not req.marker.evaluate(target.markers()):
            continue
        name = canonicalize_name(req.name)
        if req.url:
            url, _, rev = req.url.removeprefix("git+").rpartition("@")
            pins.append(Pin(name, None, Git(url, rev)))
            continue
        (spec,) = list(req.specifier)
        pins.append(Pin(name, spec.version))
    return pins


def with_from_lock(
    profile: Profile, path: Path, extras: Sequence[str], verl_given: bool
) -> Profile:
    """The profile with upstream's lock as its stack (`--from-lock PATH --extra NAME ...`):
    verl is the tree the lock lies in (unless --verl names another), and the lock's git
    sources become repositories that --mirror can serve."""
    lock_path = path / "uv.lock" if path.is_dir() else path
    if not lock_path.is_file():
        raise UsageError(f"--from-lock {path}: no such file (upstream's uv.lock)")
    if not extras:
        raise UsageError(
            f"--from-lock {path}: give the extras to install, e.g. --extra vllm --extra fsdp"
        )
    try:
        data = tomllib.loads(lock_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"--from-lock {lock_path}: not a readable uv.lock ({exc})") from None
    git = dict(profile.git)
    for raw in data.get("package", []):
        source = raw.get("source", {}) if isinstance(raw, dict) else {}
        if "git" in source:
            url = str(source["git"]).partition("#")[0].partition("?")[0]
            git[canonicalize_name(str(raw.get("name", "")))] = url
    substitute = profile.uv_lock.substitute if profile.uv_lock else {}
    uv = UvLock(tuple(extras), lock_path.absolute(), substitute)
    verl = profile.verl if verl_given else str(lock_path.absolute().parent)
    return replace(profile, uv_lock=uv, git=git, verl=verl)
