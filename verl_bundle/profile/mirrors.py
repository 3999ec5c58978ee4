"""What a profile needs mirrored behind an intranet: every location its build fetches from, what
each serves, and the whole `--mirror NAME=URL` line, so that a user finds them all at once and
not one failed build at a time. `profiles show NAME --mirrors` prints them; a build that fails on
one location names the others (`name_the_rest`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from verl_bundle.credentials import split_credentials
from verl_bundle.errors import FetchError
from verl_bundle.net.http import shown_url
from verl_bundle.profile.model import DEFAULT_INDEX, Profile

# The words of a transport failure (net/http.py's Failure, resolve/uverrors.py): a location that could
# not be reached at all, as opposed to a file it lacks or a hash that differs.
_UNREACHED = (
    "cannot be resolved",
    "cannot connect",
    "TLS verification failed",
    "the proxy failed",
    "refused access",
    "Was the index reachable",
)


@dataclass(frozen=True)
class Need:
    """One location a profile's build fetches from."""

    name: str
    kind: str  # "index" (PEP 503), "files" (a host of files at known paths) or "git"
    url: str | None  # None: the resolver's default index
    serves: tuple[str, ...]  # packages, or a phrase for the default index
    required: bool  # False: the build falls back (a prebuilt wheel -> its sdist)
    path: str | None = None  # for a files host: the path below the URL a mirror must serve

    def describe(self) -> str:
        what = ", ".join(self.serves)
        if self.kind == "git":
            return f"a git repository (a path, file://, git:// or http(s) clone): {what}"
        if self.kind == "files":
            return f"files at <URL>/{self.path}: {what}" if self.path else f"files: {what}"
        return f"a package index (PEP 503 simple/): {what}"


def needs(profile: Profile) -> list[Need]:
    """Every location a default build of `profile` fetches from: the default index first, then
    the indexes its packages are bound to, then the files hosts of its direct artifacts, the git
    repositories it builds from and, when the profile bundles a CPython by default, that
    release host."""
    found = [
        Need(
            DEFAULT_INDEX,
            "index",
            profile.location(DEFAULT_INDEX).url,
            ("every other package", "pip and uv for the server"),
            True,
        )
    ]
    bound: dict[str, list[str]] = {}
    for package, location in sorted(profile.bindings.items()):
        bound.setdefault(location, []).append(package)
    for name, packages in bound.items():
        loc = profile.location(name)
        found.append(Need(name, loc.kind, loc.url, tuple(packages), True))
    for art in profile.artifacts:
        loc = profile.location(art.location)
        kept = "required" if art.fallback == "error" else "else its sdist"
        found.append(
            Need(
                art.location,
                loc.kind,
                loc.url,
                (f"{art.package} ({kept})",),
                art.fallback == "error",
                art.file,
            )
        )
    for package, url in sorted(profile.git.items()):
        mirror = profile.git_mirrors.get(package)
        found.append(Need(package, "git", mirror or url, (f"{package}, built here",), True))
    if profile.interpreter.bundled:
        loc = profile.location(profile.interpreter.location)
        found.append(
            Need(
                loc.name,
                loc.kind,
                loc.url,
                ("the bundled CPython",),
                True,
                profile.interpreter.file,
            )
        )
    merged: dict[str, Need] = {}
    for need in found:  # one location serving two artifacts is one line
        if need.name in merged:
            old = merged[need.name]
            need = Need(
                old.name,
                old.kind,
                old.url,
                old.serves + need.serves,
                old.required or need.required,
                old.path,
            )
        merged[need.name] = need
    return list(merged.values())


def mirror_args(found: list[Need]) -> str:
    """The build's options for these locations, with URL for the user to fill in."""
    return " ".join(f"--mirror {n.name}=URL" for n in found)


def make_mirrors(found: list[Need]) -> str:
    """The same for `make bundle`: MIRRORS="NAME=URL ..."."""
    return 'MIRRORS="' + " ".join(f"{n.name}=URL" for n in found) + '"'


def _named(need: Need, message: str) -> bool:
    if not need.url:
        return False
    return shown_url(need.url) in message or split_credentials(need.url)[0] in message


def name_the_rest(error: FetchError, profile: Profile, mirrored: Mapping[str, str]) -> FetchError:
    """`error`, when it says a location could not be reached, with every other location the
    profile (mirrors applied) needs that no --mirror was given for, and the whole --mirror line;
    any other error as it is."""
    message = str(error)
    if not any(words in message for words in _UNREACHED):
        return error
    found = needs(profile)
    failed = {n.name for n in found if _named(n, message)}
    rest = [n for n in found if n.name not in mirrored and n.name not in failed]
    plain = [] if failed <= {DEFAULT_INDEX} else default_index_only()
    plain = [name for name in plain if name != profile.name]
    if not rest and not plain:
        return error
    said = message.rstrip()
    if rest:
        listed = "; ".join(
            f"{n.name} ({shown_url(n.url) if n.url else 'the default index'}: "
            f"{', '.join(n.serves)})"
            for n in rest
        )
        said += (
            f" Profile {profile.name} also needs these locations, given no --mirror: {listed}. "
            f"Behind a mirror, give every one: {mirror_args(found)} "
            f"(`verl-bundle profiles show {profile.name} --mirrors` says what each serves)."
        )
    if plain:
        said += (
            f" These profiles need only the default index: {', '.join(plain)} "
            f"(e.g. --profile {plain[-1]})."
        )
    return type(error)(said)


def only_default_index(profile: Profile) -> bool:
    """Whether a default build of `profile` needs nothing but the default index (a location it
    falls back from, such as a prebuilt wheel's release host, does not count)."""
    return all(n.name == DEFAULT_INDEX or not n.required for n in needs(profile))


def default_index_only() -> list[str]:
    """The built-in profiles that build with only the default index reachable, in order."""
    from verl_bundle.profile.catalog import builtin_profiles

    return [p.name for p in builtin_profiles() if only_default_index(p)]


@contextmanager
def naming_the_rest(profile: Profile, mirrored: Mapping[str, str]) -> Iterator[None]:
    """Around a lock or build: an unreachable location's error names the others too."""
    try:
        yield
    except FetchError as exc:
        better = name_the_rest(exc, profile, mirrored)
        if better is exc:
            raise
        raise better from exc
