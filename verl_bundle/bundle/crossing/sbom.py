"""The bundle's bill of materials (sbom.cdx.json, CycloneDX 1.6, written with
cyclonedx-python-lib) and its licence report (LICENSES.txt), both made from the manifest's
values, so that they say exactly what the manifest says.

The SBOM is deterministic: its serial number is derived from the bundle's content and its
timestamp is the lock's, so the same inputs give the same bytes (and the same tarball).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from verl_bundle import __version__
from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.wheel.licenses import UNKNOWN, Verdict, judge

if TYPE_CHECKING:
    from cyclonedx.model import ExternalReference, HashType, Property
    from cyclonedx.model.component import Component
    from cyclonedx.model.license import License

NAMESPACE = uuid.UUID("6c1f1a52-3e0b-4b8e-9a57-6f0e6b0c2a11")  # verl-bundle's SBOM serials
PYTHON_LICENSE = "Python-2.0"  # CPython's own licence (python-build-standalone's archives)


def prop(name: str, value: str) -> Property:
    from cyclonedx.model import Property

    return Property(name=f"verl-bundle:{name}", value=value)


def sha256_hash(digest: str) -> HashType:
    from cyclonedx.model import HashAlgorithm, HashType

    return HashType(alg=HashAlgorithm.SHA_256, content=digest)


def licenses_of(text: str) -> list[License]:
    from cyclonedx.contrib.license.factories import LicenseFactory
    from cyclonedx.model.license import DisjunctiveLicense

    if not text:
        return [DisjunctiveLicense(name=UNKNOWN)]
    return [LicenseFactory().make_from_string(text)]


def _distribution(url: str, sha256: str) -> list[ExternalReference]:
    from cyclonedx.exception.model import InvalidUriException
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri

    if not url:
        return []
    try:
        where = XsUri(url)
    except InvalidUriException:
        return []
    return [
        ExternalReference(
            type=ExternalReferenceType.DISTRIBUTION,
            url=where,
            hashes=[sha256_hash(sha256)],
        )
    ]


def _vcs(source: mf.Source) -> list[ExternalReference]:
    """A wheel made from git: its repository at the commit (CycloneDX `vcs`)."""
    from cyclonedx.exception.model import InvalidUriException
    from cyclonedx.model import ExternalReference, ExternalReferenceType, XsUri

    if source.kind != "git" or not source.commit:
        return []
    try:
        where = XsUri(f"git+{source.origin}@{source.commit}")
    except InvalidUriException:
        return []
    return [ExternalReference(type=ExternalReferenceType.VCS, url=where)]


def _component(f: mf.File) -> Component:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    props = [
        prop("path", f.path),
        prop("kind", f.kind),
        prop("phase", f.phase),
        prop("location", f.location),
    ]
    if f.compiled is not None:
        props.append(prop("compiled", f"{f.compiled.toolkit}; {f.compiled.archs}"))
    if f.built_from is not None:
        props.append(prop("built-from", f"{f.built_from.file} sha256:{f.built_from.sha256}"))
    refs = _distribution(f.url, f.sha256) if f.source is None else []
    if f.source is not None:
        props.append(prop("source", f.source.describe()))
        if f.source.tree_sha256:
            props.append(prop("source-tree-sha256", f.source.tree_sha256))
        refs = _vcs(f.source)
    return Component(
        type=ComponentType.LIBRARY,
        name=f.name,
        version=f.version,
        bom_ref=f.path,
        # The version as in the file name: a local label such as +cu118 is kept.
        purl=PackageURL(
            "pypi", name=f.name, version=f.version, qualifiers={"file_name": f.filename}
        ),
        hashes=[sha256_hash(f.sha256)],
        licenses=licenses_of(f.license),
        external_references=refs,
        properties=props,
    )


def _interpreter(i: mf.Interpreter) -> Component:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    return Component(
        type=ComponentType.APPLICATION,
        name="cpython",
        version=i.version,
        bom_ref=i.path,
        purl=PackageURL("generic", name="cpython", version=i.version),
        hashes=[sha256_hash(i.sha256)],
        licenses=licenses_of(PYTHON_LICENSE),
        external_references=_distribution(i.url, i.sha256),
        properties=[prop("path", i.path), prop("release", i.release)],
    )


def timestamp_of(created: str) -> datetime:
    try:
        when = datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return datetime(1980, 1, 2, tzinfo=timezone.utc)  # the tarball's fixed time
    return when if when.tzinfo else when.replace(tzinfo=timezone.utc)


def serial(m: mf.Manifest, lock_sha256: str) -> uuid.UUID:
    """The SBOM's serial number: one per bundle content (name, lock, every file by hash)."""
    content = "\n".join([m.name, lock_sha256, *sorted(f"{f.sha256} {f.path}" for f in m.files)])
    return uuid.uuid5(NAMESPACE, content)


def document(m: mf.Manifest, lock_sha256: str) -> bytes:
    """sbom.cdx.json for the bundle `m` describes: every payload file (and the bundled CPython)
    as a component, the bundle itself as the metadata's component."""
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    t = m.target
    bundle = Component(
        type=ComponentType.APPLICATION,
        name=m.name,
        version=lock_sha256[:12],
        bom_ref=m.name,
        description=m.profile.description or None,
        properties=[
            prop("profile", m.profile.name),
            prop("profile-sha256", m.profile.sha256),
            prop("target", f"Python {t.python} ({t.python_tag}), {t.platform}, CUDA {t.cuda}"),
            prop("lock-sha256", lock_sha256),
            prop("tool", f"verl-bundle {__version__}"),
        ],
    )
    components = [_component(f) for f in m.files]
    if m.interpreter is not None:
        components.append(_interpreter(m.interpreter))
    bom = Bom(
        serial_number=serial(m, lock_sha256),
        metadata=BomMetaData(component=bundle, timestamp=timestamp_of(m.created)),
        components=components,
    )
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="verl-bundle", version=__version__)
    )
    for c in components:
        bom.register_dependency(bundle, [c])
    return (JsonV1Dot6(bom).output_as_string(indent=2) + "\n").encode()


@dataclass(frozen=True)
class LicenceGroup:
    """The components ("name version") that declare one licence, and its judgement."""

    name: str
    open: bool
    why: str
    components: tuple[str, ...]


def licences(m: mf.Manifest) -> tuple[LicenceGroup, ...]:
    """The bundle's components (every payload file and the bundled CPython) grouped by licence,
    as LICENSES.txt and `inspect` show them: those to review first, then by size of group."""
    groups: dict[str, list[str]] = defaultdict(list)
    verdicts: dict[str, Verdict] = {}
    items = [(f.name, f.version, f.license) for f in m.files]
    if m.interpreter is not None:
        items.append(("cpython", m.interpreter.version, PYTHON_LICENSE))
    for name, version, license in items:
        v = judge(license)
        verdicts[v.name] = v
        groups[v.name].append(f"{name} {version}")
    ordered = sorted(groups, key=lambda n: (verdicts[n].open, -len(groups[n]), n))
    return tuple(
        LicenceGroup(n, verdicts[n].open, verdicts[n].why, tuple(sorted(groups[n])))
        for n in ordered
    )


def report(m: mf.Manifest) -> str:
    """LICENSES.txt: the components grouped by licence, the ones to review first, so that an
    approver reads one page."""
    groups = licences(m)
    review = sorted((g for g in groups if not g.open), key=lambda g: g.name)
    good = sorted((g for g in groups if g.open), key=lambda g: g.name)
    lines = [
        f"Licences of {m.name} (profile {m.profile.name}): "
        f"{sum(len(g.components) for g in groups)} components, "
        f"{sum(len(g.components) for g in review)} to review.",
        "Each component's licence is the one its metadata declares (License-Expression, else",
        "License, else its classifiers); sbom.cdx.json has the same, with hashes and URLs.",
        "",
    ]
    if review:
        lines += ["TO REVIEW (not a licence known as open source):", ""]
        for g in review:
            lines.append(f"{g.name}  [{g.why}]")
            lines += [f"    {c}" for c in g.components]
        lines.append("")
    if good:
        lines += ["OPEN SOURCE:", ""]
        for g in good:
            lines.append(f"{g.name}  ({len(g.components)})")
            lines += [f"    {c}" for c in g.components]
    return "\n".join(lines).rstrip("\n") + "\n"
