"""The built-in profiles, and choosing one: by name, by file, or by the CUDA version a server's
driver supports (`--cuda X.Y`). When nothing fits, the message names what would."""

from __future__ import annotations

import re
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from verl_bundle.errors import UsageError
from verl_bundle.profile.load import load_profile
from verl_bundle.profile.model import Profile
from verl_bundle.profile.target import Target, parse_python
from verl_bundle.resources import data_dir


def builtin_profiles() -> list[Profile]:
    return [load_profile(p) for p in sorted(data_dir("profiles").glob("*.toml"))]


def find_profile(spec: str) -> Profile:
    """A built-in profile by name, or a profile file by path."""
    path = Path(spec).expanduser()
    if spec.endswith(".toml") or "/" in spec or path.is_file():
        if not path.is_file():
            raise UsageError(f"--profile {spec}: no such file")
        return load_profile(path)
    candidate = data_dir("profiles") / f"{spec}.toml"
    if candidate.is_file():
        return load_profile(candidate)
    names = ", ".join(p.stem for p in sorted(data_dir("profiles").glob("*.toml")))
    raise UsageError(
        f"--profile {spec}: no built-in profile of that name (built-in: {names}); "
        "give a path to use your own file"
    )


def _cuda(p: Profile) -> tuple[int, int]:
    major, minor = p.cuda.split(".")[:2]
    return int(major), int(minor)


def _preferred(profiles: list[Profile]) -> Profile:
    """Of profiles for one CUDA version, the one named cuXY (else the first by name)."""
    major, minor = _cuda(profiles[0])
    by_name = sorted(profiles, key=lambda p: p.name)
    return next((p for p in by_name if p.name == f"cu{major}{minor}"), by_name[0])


def cuda_ranges(profiles: list[Profile]) -> str:
    """ "cu118 (CUDA 11.8-11.x), cu121 (12.1-12.3), ..." - the driver versions each built-in is the
    newest fit for, under minor-version compatibility."""
    ordered = sorted(profiles, key=lambda p: (_cuda(p), p.name))
    # A profile that shares its CUDA with the one --cuda prefers (cu118-legacy beside cu118) is
    # picked by name only: listed last, as such.
    by_name = [
        p for p in ordered if p is not _preferred([q for q in ordered if _cuda(q) == _cuda(p)])
    ]
    ordered = [p for p in ordered if p not in by_name]
    parts = []
    for i, p in enumerate(ordered):
        major, minor = _cuda(p)
        later = [q for q in ordered[i + 1 :] if _cuda(q)[0] == major and _cuda(q) != (major, minor)]
        upper = f"{major}.{_cuda(later[0])[1] - 1}" if later else f"{major}.x"
        span = p.cuda if upper == p.cuda else f"{p.cuda}-{upper}"
        parts.append(f"{p.name} (CUDA {span})")
    parts += [f"{p.name} (CUDA {p.cuda}, by --profile only)" for p in by_name]
    return ", ".join(parts)


def _no_fit(cuda: str, want: tuple[int, int], profiles: list[Profile]) -> UsageError:
    """What would run on a driver for CUDA `want` when no built-in is made for it."""
    ranges = cuda_ranges(profiles)
    newer = sorted((p for p in profiles if _cuda(p)[0] == want[0]), key=_cuda)
    older = sorted((p for p in profiles if _cuda(p) < want), key=_cuda)
    if newer:
        p = _preferred([q for q in newer if _cuda(q) == _cuda(newer[0])])
        compat, full = p.toolchain.driver_compat, p.toolchain.driver
        upgrade = " and ".join(
            x
            for x in (
                f">= {compat}" if compat else "",
                f">= {full} for the full toolkit" if full else "",
            )
            if x
        )
        hint = (
            f"a driver for CUDA {cuda} runs {p.name} (CUDA {p.cuda}) under minor-version "
            f"compatibility{f' if it is >= {compat}' if compat else ''} (the bundle carries its "
            f"CUDA runtime; only a source build needs the {p.cuda} toolkit): pass --cuda "
            f"{p.cuda}; an older driver must be upgraded{f' ({upgrade})' if upgrade else ''}, "
            "or pass --profile with your own file"
        )
    elif older:
        p = _preferred([q for q in older if _cuda(q) == _cuda(older[-1])])
        hint = (
            f"a driver for CUDA {cuda} also runs builds for older CUDA versions: the newest "
            f"built-in it runs is {p.name} (CUDA {p.cuda}): pass --cuda {p.cuda}, or pass "
            "--profile with your own file"
        )
    else:
        p = _preferred([q for q in profiles if _cuda(q) == min(map(_cuda, profiles))])
        need = p.toolchain.driver_compat or p.toolchain.driver
        hint = (
            f"the oldest built-in is {p.name} (CUDA {p.cuda})"
            + (f": upgrade the driver to >= {need}" if need else ": upgrade the driver")
            + ", or pass --profile with your own file"
        )
    return UsageError(
        f"--cuda {cuda}: no built-in profile is made for CUDA {cuda} or an older "
        f"{want[0]}.x (built-in: {ranges}); {hint}"
    )


def profile_for_cuda(cuda: str) -> Profile:
    """The built-in profile for `--cuda X.Y`.

    An exact CUDA match wins (the one named cuXY when several match). Otherwise the profile
    with the same major and the highest minor not above X.Y: CUDA's minor-version
    compatibility lets an X.Y driver run any X.(<=Y) build, so --cuda 12.2 picks cu121."""
    m = re.fullmatch(r"(\d+)\.(\d+)", cuda.strip())
    if not m:
        raise UsageError(
            f"--cuda {cuda!r}: write the CUDA version as X.Y, e.g. 11.8 (nvidia-smi shows the "
            "driver's as 'CUDA Version')"
        )
    want = (int(m.group(1)), int(m.group(2)))
    profiles = builtin_profiles()
    exact = [p for p in profiles if _cuda(p) == want]
    if exact:
        return _preferred(exact)
    fits = [p for p in profiles if _cuda(p)[0] == want[0] and _cuda(p)[1] < want[1]]
    if fits:
        best = max(map(_cuda, fits))
        return _preferred([p for p in fits if _cuda(p) == best])
    raise _no_fit(cuda, want, profiles)


def select_profile(cuda: str | None, profile: str | None) -> Profile:
    if cuda and profile:
        raise UsageError("give either --cuda or --profile, not both")
    if profile:
        return find_profile(profile)
    if cuda:
        return profile_for_cuda(cuda)
    raise UsageError("say which stack to bundle: --cuda X.Y (e.g. 11.8) or --profile NAME|PATH")


def target_for(profile: Profile, python: str | None, platform: str | None) -> Target:
    """The profile's target for `--python`/`--platform`; a Python the profile does not support
    names the built-in profiles that do."""
    try:
        return profile.target(python, platform)
    except UsageError as exc:
        if python is None or not profile.python_versions:
            raise
        version = Version("{}.{}".format(*parse_python(python)))
        if version in SpecifierSet(profile.python_versions):
            raise
        others = [
            f"{p.name} (CUDA {p.cuda}, Python {p.python_versions})"
            for p in builtin_profiles()
            if p.name != profile.name
            and (p.python_versions is None or version in SpecifierSet(p.python_versions))
        ]
        fits = f"; profiles for Python {version}: {', '.join(others)}" if others else ""
        raise UsageError(f"{exc}{fits}") from None
