"""Direct artifacts: prebuilt wheels a profile names on file hosts (a GitHub release's flash-attn,
vllm's cu118 builds), tried in the order listed for each package the resolver chose; the first
that is there and fits the stack's torch/CUDA/C++ ABI replaces the resolver's pick, else the
pick stays with a note, or the build stops where the profile allows no fallback."""

from __future__ import annotations

from collections.abc import Iterable

from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from verl_bundle.airgap.contract.names import UnsafeNameError, plain_filename
from verl_bundle.credentials import split_credentials
from verl_bundle.errors import FetchError, ProfileError, ResolutionError
from verl_bundle.net.download import Downloader, Want
from verl_bundle.net.http import shown_url
from verl_bundle.profile.model import DirectArtifact, Location, Profile
from verl_bundle.profile.target import Target
from verl_bundle.progress import Reporter
from verl_bundle.resolve.lock import LockedFile
from verl_bundle.resolve.uvcompile import Candidate
from verl_bundle.wheel import origin
from verl_bundle.wheel.integrity import ensure_whole


def apply_artifacts(
    profile: Profile,
    target: Target,
    chosen: dict[str, Candidate],
    downloader: Downloader,
    reporter: Reporter,
    artifacts: Iterable[DirectArtifact] | None = None,
) -> dict[str, Candidate]:
    """Each package's direct artifacts (the profile's, or `artifacts`), tried in the order
    listed: the first that is there and, where the profile says what it must be built
    against, fits, replaces what the resolver picked; when none does, the resolver's pick
    stays (a note says why), or the build stops where the profile allows no fallback."""
    out = dict(chosen)
    by_package: dict[str, list[DirectArtifact]] = {}
    for art in profile.artifacts if artifacts is None else artifacts:
        by_package.setdefault(canonicalize_name(art.package), []).append(art)
    for name, arts in by_package.items():
        cand = chosen.get(name)
        if cand is None:
            continue
        tried: list[str] = []
        for art in arts:
            found, why = _try_artifact(profile, target, art, cand, downloader, reporter)
            if found is not None:
                out[name] = found
                break
            tried.append(why)
        else:
            if any(a.fallback == "error" for a in arts):
                raise FetchError(
                    f"{arts[0].package}: {'; '.join(tried)}; this profile needs one of these "
                    f"files (there is no fallback). Point --mirror {arts[0].location}=URL at "
                    "a host that serves it"
                )
            reporter.note(
                f"note: {arts[0].package}: {'; '.join(tried)}; using {cand.file.filename} "
                f"from {cand.location} instead"
            )
    return out


def _try_artifact(
    profile: Profile,
    target: Target,
    art: DirectArtifact,
    cand: Candidate,
    downloader: Downloader,
    reporter: Reporter,
) -> tuple[Candidate | None, str]:
    """The artifact as the package's candidate, or None and why not (one phrase)."""
    version = Version(cand.version).public
    loc: Location = profile.location(art.location)
    path = art.path_for(version, target)
    filename = _artifact_filename(art.package, path, profile)
    url = f"{split_credentials(loc.url or '')[0]}/{path}"
    shown = f"{shown_url(loc.url or '')}/{path}"
    _check_artifact_name(art.package, version, filename, target)
    if art.expect is not None:
        why, _ = origin.check(art.expect, filename, None)
        if why:
            return None, f"{shown} (location {art.location}) does not fit: {why}"
    probe = downloader.probe(url)
    if not probe.available:
        return None, f"{shown} (location {art.location}) is not available ({probe.reason})"
    known = art.sha256.get(filename)
    if known and art.expect is None:
        file = LockedFile(filename, url, known, probe.size)
    else:
        got = downloader.fetch(Want(art.package, filename, url, art.location, known, probe.size))
        if not known:
            # No published hash: the zip's own CRCs and RECORD are the only check there is.
            ensure_whole(
                downloader.cache,
                got.path,
                got.sha256,
                package=art.package,
                filename=filename,
                url=url,
            )
        if art.expect is not None:
            why, checked = origin.check(art.expect, filename, got.path)
            if why:
                return None, f"{shown} (location {art.location}) does not fit: {why}"
            reporter.note(
                f"note: {art.package}: {filename} from {art.location} checked against "
                f"{art.expect.describe()}: {checked}"
            )
        file = LockedFile(filename, url, got.sha256, got.size)
    found = Candidate(cand.name, str(parse_wheel_filename(filename)[1]), file, art.location)
    return found, ""


def _artifact_filename(package: str, path: str, profile: Profile) -> str:
    """The file name at the end of a direct artifact's path: it names files in the cache and
    the bundle, so it must be one plain component."""
    try:
        return plain_filename(path.rsplit("/", 1)[-1], f"{package}: direct artifact {path!r}")
    except UnsafeNameError as exc:
        raise ProfileError(
            f"{profile.path}: {exc}; fix the artifact's file template in the profile"
        ) from None


def _check_artifact_name(package: str, version: str, filename: str, target: Target) -> None:
    if not filename.endswith(".whl"):
        raise ResolutionError(f"{package}: direct artifact {filename} is not a wheel")
    name, wheel_version, _, _ = parse_wheel_filename(filename)
    if name != canonicalize_name(package) or wheel_version.public != version:
        raise ResolutionError(
            f"{package}: direct artifact {filename} is not {package} {version}; fix the "
            "artifact's file template in the profile"
        )
    if target.wheel_rank(filename) is None:
        raise ResolutionError(
            f"{package}: direct artifact {filename} does not install on {target.describe()}"
        )
