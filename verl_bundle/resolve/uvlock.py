"""Upstream's own lock as the stack: verl's `uv.lock` (with the `pyproject.toml` beside it)
read for the extras asked, one file per package chosen for the target, nothing resolved again.

`uv export --frozen --offline` says which (name, version) the extras select (uv evaluates the
lock's forks and conflicts; nothing is built or fetched); the lock's own TOML says where each
file is and its hash. Then per package, by the lock's source:
- the default index (a registry no `[[tool.uv.index]]` names): the lock's file and hash;
- a named index the profile substitutes (`[uv-lock] substitute`, e.g. the PyTorch cu130 index
  by the default index, whose torch 2.11.0 is the same CUDA build): the same version, less its
  local label, from that location, said in a note;
- a named index whose entries the lock carries without hashes (verl's wheelhouse): the
  profile's direct artifacts for it, tried in order, else the lock's URL itself; hashed on
  download; where none can be had, the profile's source build from the default index's sdist;
- git: built on this host from the commit the lock pins (sources/sourcebuild.py, mirrors
  honoured); verl itself (`editable = "."`): the tree the lock came with, built the same way.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from verl_bundle.errors import ProfileError, ResolutionError, UsageError
from verl_bundle.net.download import Downloader
from verl_bundle.profile.model import DEFAULT_INDEX, DirectArtifact, Profile, UvLock
from verl_bundle.profile.sources import Git
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter
from verl_bundle.resolve import resolver
from verl_bundle.resolve.artifacts import apply_artifacts
from verl_bundle.resolve.lock import LOCAL, Lock, LockedFile, now
from verl_bundle.resolve.uvcompile import Candidate, resolve
from verl_bundle.sources.sourcebuild import BuiltSource, SourceBuilder
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


@dataclass(frozen=True)
class FromLock:
    lock: Lock
    built: Mapping[str, BuiltSource]


def lock_from_uv(
    profile: Profile,
    target: Target,
    verl: BuiltSource,
    builder: SourceBuilder,
    downloader: Downloader,
    reporter: Reporter,
) -> FromLock:
    """The stack of verl's own uv.lock (in `verl`'s tree, or the profile's `[uv-lock] path`)
    for the profile's extras, as a verl-bundle lock for `target`."""
    spec = profile.uv_lock
    if spec is None:  # pragma: no cover - the pipeline asks only for a profile with [uv-lock]
        raise ProfileError(f"{profile.path}: no [uv-lock]")
    where = str(spec.path.parent) if spec.path else verl.source.describe()
    files = project_files(spec.path.parent) if spec.path else dict(verl.project)
    project = read_project(files, where)
    pins = selected(export(project, spec.extras, where, downloader), target)
    chosen: dict[str, Candidate] = {}
    built: dict[str, BuiltSource] = {"verl": verl}
    wanted_from_index: dict[str, str] = {}  # name -> version, taken from the default index
    hashless: dict[str, tuple[str, Candidate]] = {}  # name -> (index, candidate)
    indexes = project.indexes
    for pin in pins:
        record = project.record(pin.name, pin.version)
        if record is None:
            raise ResolutionError(
                f"{where}/uv.lock: {pin.name} {pin.version or ''} is exported but not in the "
                "lock; the lock and pyproject.toml do not belong together"
            )
        source = record.get("source", {})
        if pin.git is not None or "git" in source:
            git = _git_of(pin, source)
            made = builder.make(pin.name, git)
            built[pin.name] = made
            for note in made.notes:
                reporter.note(note)
            chosen[pin.name] = _local(made)
            continue
        if "registry" not in source:
            raise ResolutionError(
                f"{where}/uv.lock: {pin.name} comes from {sorted(source)}, which verl-bundle "
                "does not take from a lock (a registry or git only)"
            )
        index = indexes.get(str(source["registry"]).rstrip("/"))
        version = str(record["version"])
        if index is not None and index in spec.substitute:
            wanted_from_index[pin.name] = Version(version).public
            reporter.note(
                f"note: {pin.name} {version}: the lock takes it from index {index}; taken as "
                f"{Version(version).public} from {spec.substitute[index]} instead (the profile's "
                "[uv-lock] substitute: the same build under the version without its label)"
            )
            continue
        cand = _from_record(pin.name, version, record, target, index or DEFAULT_INDEX, where)
        if index is not None and not cand.file.sha256:
            hashless[pin.name] = (index, cand)
            continue
        if index is not None and index not in profile.locations:
            raise ProfileError(
                f"{profile.path}: the lock takes {pin.name} from index {index!r}, which is no "
                f"location of the profile; add [locations.{index}] or [uv-lock] substitute"
            )
        chosen[pin.name] = cand
    chosen["verl"] = _local(verl)
    # The default index for what it is to serve instead (and the server's pip and uv): one uv
    # resolution of exactly those pins, with nothing else of the stack.
    builds = {b.package for b in profile.source_builds}
    fallbacks = {n: hashless[n][1].version for n in hashless if n in builds}
    wanted = {**wanted_from_index, **fallbacks}
    side = _from_default_index(profile, target, wanted, downloader)
    for name in wanted_from_index:
        chosen[name] = side[name]
    for name, (index, cand) in hashless.items():
        chosen[name] = _hashless(
            profile, target, name, index, cand, side.get(name), downloader, reporter
        )
    bootstrap = {canonicalize_name(Requirement(r).name) for r in profile.bootstrap}
    for name in bootstrap:
        chosen.setdefault(name, side[name])
    server = resolver.server_builds(profile, chosen)
    # A server build's build requirements join the stack (installed before it, --no-build-
    # isolation): those the lock lacks (flash-attn's `wheel`) from the default index, held to
    # the versions the lock has.
    absent = sorted(
        {r for b in server for r in b.build_requires if _name(r) not in chosen}, key=_name
    )
    if absent:
        held = [f"{c.name}=={c.version}" for c in chosen.values() if c.location != LOCAL]
        more = _from_default_index(profile, target, {}, downloader, absent, held)
        for req in absent:
            chosen[_name(req)] = more[_name(req)]
    chosen = resolver.complete(chosen, downloader)
    packages = tuple(resolver.classify(profile, c, server) for c in chosen.values())
    locations = {
        name: loc.url or ""
        for name, loc in sorted(profile.locations.items())
        if name in {p.location for p in packages} or name == DEFAULT_INDEX
    }
    lock = Lock(
        profile=profile.name,
        profile_sha256=profile.sha256,
        target=target,
        cuda=profile.cuda,
        packages=tuple(sorted(packages, key=lambda p: p.name)),
        locations=locations,
        exclude_newer=None,
        created=now(),
        overrides=project.overrides(target, spec.extras),
    )
    return FromLock(lock, built)


def _git_of(pin: Pin, source: Mapping[str, Any]) -> Git:
    """The lock's git source: `URL?rev=main#COMMIT` (the revision asked, the commit got)."""
    text = str(source.get("git", ""))
    url, _, commit = text.partition("#")
    base, _, query = url.partition("?")
    asked = ""
    for part in query.split("&"):
        key, _, value = part.partition("=")
        if key in ("rev", "tag", "branch"):
            asked = unquote(value)
    commit = commit or (pin.git.rev if pin.git else "")
    if not commit:
        raise ResolutionError(f"{pin.name}: the lock's git source {text!r} pins no commit")
    return Git(base or (pin.git.url if pin.git else ""), commit, asked)


def _local(made: BuiltSource) -> Candidate:
    w = made.wheel
    return Candidate(made.name, made.version, LockedFile(w.filename, "", w.sha256, w.size), LOCAL)


def _filename(url: str) -> str:
    return unquote(urlsplit(url).path.rsplit("/", 1)[-1])


def _from_record(
    name: str, version: str, record: Mapping[str, Any], target: Target, location: str, where: str
) -> Candidate:
    """The lock's best file for the target (a wheel, else its sdist)."""
    best: tuple[int, Mapping[str, Any]] | None = None
    for wheel in record.get("wheels", []):
        rank = target.wheel_rank(_filename(wheel["url"]))
        if rank is not None and (best is None or rank < best[0]):
            best = (rank, wheel)
    entry = best[1] if best is not None else record.get("sdist")
    if entry is None or "url" not in entry:
        raise ResolutionError(
            f"{where}/uv.lock: {name} {version} has no file for {target.describe()}; pick the "
            "lock's own target (its environments) with --python and --platform"
        )
    digest = str(entry.get("hash", ""))
    sha = digest.removeprefix("sha256:") if digest.startswith("sha256:") else ""
    file = LockedFile(_filename(entry["url"]), str(entry["url"]), sha, entry.get("size"))
    return Candidate(name, version, file, location)


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def _from_default_index(
    profile: Profile,
    target: Target,
    wanted: Mapping[str, str],
    downloader: Downloader,
    more: Sequence[str] = (),
    held: Sequence[str] = (),
) -> dict[str, Candidate]:
    """`name==version` for each wanted package (and `more` requirements, with `held` as
    constraints) and the profile's bootstrap, resolved on the default index alone, with the
    profile's static metadata for what cannot be built."""
    asked = [*(f"{n}=={v}" for n, v in sorted(wanted.items())), *more]
    alone = replace(
        profile,
        requirements=tuple(asked) or tuple(profile.bootstrap),
        constraints=tuple(held),
        overrides=(),
        bindings={},
        artifacts=(),
        uv_lock=None,
    )
    return resolve(alone, target, None, (), downloader)


def _hashless(
    profile: Profile,
    target: Target,
    name: str,
    index: str,
    cand: Candidate,
    fallback: Candidate | None,
    downloader: Downloader,
    reporter: Reporter,
) -> Candidate:
    """A file the lock names without a hash (verl's wheelhouse): the profile's artifacts for
    it in order, else the lock's own URL; hashed as it is downloaded. Where none is there:
    the default index's sdist for the profile's source build, else one line."""
    arts = [a for a in profile.artifacts if canonicalize_name(a.package) == name]
    if not arts:
        arts = [_artifact_of_url(profile, name, index, cand.file.url)]
    if fallback is None:
        arts = [replace(a, fallback="error") for a in arts]
        start = {name: cand}
    else:
        arts = [replace(a, fallback="resolved") for a in arts]
        start = {name: fallback}
    got = apply_artifacts(profile, target, start, downloader, reporter, arts)
    return got[name]


def _artifact_of_url(profile: Profile, name: str, index: str, url: str) -> DirectArtifact:
    """The lock's own URL as a direct artifact of the files location it lies under."""
    for loc in profile.locations.values():
        base = (loc.url or "").rstrip("/")
        if loc.kind == "files" and base and url.startswith(base + "/"):
            path = url[len(base) + 1 :]
            return DirectArtifact(name, loc.name, path.replace("{", "{{").replace("}", "}}"))
    raise ProfileError(
        f"{profile.path}: the lock takes {name} from index {index!r} without a hash, at "
        f"{url}, which lies under no files location of the profile; add one (or "
        f"[[artifacts]] for {name})"
    )


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
