"""`verl-bundle profiles` and `profiles show` as a `Shown` (cli/render/results.py's value): each profile's
target, what it is ready for and its known limit, and where its files come from."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from verl_bundle.cli.render.shown import Shown

if TYPE_CHECKING:
    from verl_bundle.profile.model import Profile


def profile_summary(p: Profile) -> dict[str, Any]:
    return {
        "name": p.name,
        "cuda": p.cuda,
        "python": p.python,
        "platform": p.platform,
        "description": p.description,
        "readiness": {"purpose": p.readiness.purpose, "limit": p.readiness.limit},
        "path": str(p.path),
        "sources": profile_sources(p),
    }


def profiles_text(profiles: list[Profile]) -> str:
    width = max((len(p.name) for p in profiles), default=4)
    lines = [f"{'NAME':<{width}}  CUDA   PYTHON  DESCRIPTION"]
    for p in profiles:
        lines.append(f"{p.name:<{width}}  {p.cuda:<5}  {p.python:<6}  {p.description}")
        limit = f"; known limit: {p.readiness.limit}" if p.readiness.limit else ""
        lines.append(f"{'':<{width}}  ready for: {p.readiness.purpose}{limit}")
        lines.append(f"{'':<{width}}  needs: {_needs(p)}")
    return "\n".join(lines)


def _needs(p: Profile) -> str:
    """What a build of `p` must reach: only the default index, or which locations more."""
    from verl_bundle.profile.mirrors import needs, only_default_index
    from verl_bundle.profile.model import DEFAULT_INDEX

    if only_default_index(p):
        return "only the default index"
    more = [n.name for n in needs(p) if n.required and n.name != DEFAULT_INDEX]
    return f"the default index and {', '.join(more)} (`profiles show {p.name} --mirrors`)"


def profile_sources(p: Profile) -> dict[str, Any]:
    """Where a profile's files come from, and whether it needs more than the default index."""
    from verl_bundle.profile.mirrors import only_default_index

    used: dict[str, list[str]] = {}
    for pkg, loc in sorted(p.bindings.items()):
        used.setdefault(loc, []).append(pkg)
    for art in p.artifacts:
        suffix = " (else its sdist)" if art.fallback == "resolved" else " (required)"
        used.setdefault(art.location, []).append(art.package + suffix)
    indexes = [n for n in used if p.location(n).kind == "index" and n != "pypi"]
    assets = [n for n in used if p.location(n).kind == "files"]
    return {
        "locations": {
            name: {"url": p.location(name).url, "packages": pkgs}
            for name, pkgs in sorted(used.items())
        },
        "needs_extra_index": bool(indexes),
        "needs_release_assets": any(a.fallback == "error" for a in p.artifacts),
        "default_index_only": only_default_index(p),
        "uses_release_assets": bool(assets),
        "lock": str(p.lock) if p.lock else None,
    }


def profile_show(p: Profile, figures: tuple[str, ...] = ()) -> str:
    src = profile_sources(p)
    lines = [
        f"{p.name}: {p.description}",
        f"  CUDA {p.cuda}; Python {p.python} by default"
        + (f" (supports {p.python_versions})" if p.python_versions else "")
        + f"; platform {p.platform}",
        "  files come from the default index (pypi, or its --mirror)"
        + (", and:" if src["locations"] else " only"),
    ]
    for name, info in src["locations"].items():
        lines.append(
            f"    {name:<20} {info['url'] or 'the default index'}  ({', '.join(info['packages'])})"
        )
    if src["needs_extra_index"]:
        lines.append(
            "  needs the PyTorch index (or a --mirror of it): its CUDA builds come only from there"
        )
    if src["needs_release_assets"]:
        lines.append(
            "  needs release assets (or a --mirror of the release host): a required file is only there"
        )
    elif src["uses_release_assets"]:
        lines.append("  uses release assets when reachable; without them it falls back as noted")
    lines.append(f"  committed lock: {src['lock'] or 'none (builds resolve)'}")
    lines += [f"  {line}" for line in figures]
    lines.append(f"  file: {p.path}")
    lines.append("")
    lines.append(p.path.read_text(encoding="utf-8").rstrip("\n"))
    return "\n".join(lines)


def mirrors_text(p: Profile) -> str:
    from verl_bundle.profile.mirrors import make_mirrors, mirror_args, needs

    found = needs(p)
    width = max(len(n.name) for n in found)
    count = f"{len(found)} location" + ("s" if len(found) > 1 else "")
    lines = [f"{p.name} builds from {count}; behind a mirror, give each its URL:"]
    for n in found:
        public = "the default index" if n.url is None else n.url
        lines.append(f"  {n.name:<{width}}  {n.describe()}")
        lines.append(f"  {'':<{width}}  (public: {public})")
    if not p.interpreter.bundled:
        lines.append(
            f"  with --with-python also {p.interpreter.location}=URL (files at "
            f"<URL>/{p.interpreter.file}: the bundled CPython)"
        )
    lines.append(f"make bundle PROFILE={p.name} {make_mirrors(found)}")
    lines.append(mirror_args(found))
    return "\n".join(lines)


def mirrors_json(p: Profile) -> dict[str, Any]:
    from verl_bundle.profile.mirrors import mirror_args, needs

    found = needs(p)
    return {
        "profile": p.name,
        "locations": [
            {
                "name": n.name,
                "kind": n.kind,
                "url": n.url,
                "serves": list(n.serves),
                "required": n.required,
                "path": n.path,
            }
            for n in found
        ],
        "mirror_args": mirror_args(found),
    }


def mirrors(p: Profile) -> Shown:
    return Shown("profiles show", True, mirrors_json(p), mirrors_text(p))


def profiles(found: list[Profile]) -> Shown:
    return Shown("profiles", True, [profile_summary(p) for p in found], profiles_text(found))


def profile(p: Profile) -> Shown:
    """`profiles show`: the summary, plus the figures a bundle of it carries (the driver, each
    source build's phase, GPU architectures and build time: bundle/plan.py profile_figures, the
    manifest's own values, so the doctor and the installer say the same)."""
    from verl_bundle.bundle.plan import profile_figures

    figures = profile_figures(p)
    result = {**profile_summary(p), "figures": list(figures)}
    return Shown("profiles show", True, result, profile_show(p, figures))
