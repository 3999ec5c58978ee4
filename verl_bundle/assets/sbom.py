"""The asset bundle's sbom.cdx.json and LICENSES.txt: each model and dataset as a CycloneDX
component (a machine-learning model or data, `pkg:huggingface/ORG/NAME@COMMIT`, its files with
their sha256 inside it) with the licence its card states, so that an approver reads models the
way they read the stack (verl_bundle/bundle/crossing/sbom.py)."""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import TYPE_CHECKING

from verl_bundle import __version__
from verl_bundle.airgap.contract import assets as am
from verl_bundle.bundle.crossing.sbom import NAMESPACE, licenses_of, prop, sha256_hash, timestamp_of
from verl_bundle.wheel.licenses import judge

if TYPE_CHECKING:
    from cyclonedx.model.component import Component


def _component(a: am.Asset) -> Component:
    from cyclonedx.model.component import Component, ComponentType
    from packageurl import PackageURL

    org, _, name = a.repo_id.rpartition("/")
    kind = ComponentType.MACHINE_LEARNING_MODEL if a.kind == "model" else ComponentType.DATA
    files = [
        Component(
            type=ComponentType.FILE,
            name=f.path.rsplit("/", 1)[-1],
            bom_ref=f.path,
            hashes=[sha256_hash(f.sha256)],
            properties=[prop("source", f.source)] if f.source else [],
        )
        for f in a.files
    ]
    return Component(
        type=kind,
        name=a.repo_id,
        version=a.commit,
        bom_ref=a.path,
        purl=PackageURL("huggingface", namespace=org or None, name=name, version=a.commit),
        licenses=licenses_of(a.license),
        properties=[prop("revision", a.revision), prop("path", a.path)],
        components=files,
    )


def document(m: am.AssetsManifest) -> bytes:
    from cyclonedx.model.bom import Bom, BomMetaData
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6

    content = "\n".join([m.name, *sorted(f"{a.repo_id}@{a.commit}" for a in m.assets)])
    bundle = Component(
        type=ComponentType.DATA,
        name=m.name,
        bom_ref=m.name,
        properties=[prop("tool", f"verl-bundle {__version__}")],
    )
    components = [_component(a) for a in m.assets]
    bom = Bom(
        serial_number=uuid.uuid5(NAMESPACE, content),
        metadata=BomMetaData(component=bundle, timestamp=timestamp_of(m.created)),
        components=components,
    )
    bom.metadata.tools.components.add(
        Component(type=ComponentType.APPLICATION, name="verl-bundle", version=__version__)
    )
    bom.register_dependency(bundle, components)
    return (JsonV1Dot6(bom).output_as_string(indent=2) + "\n").encode()


def report(m: am.AssetsManifest) -> str:
    """LICENSES.txt for models and datasets: each with the licence its card states."""
    groups: dict[str, list[str]] = defaultdict(list)
    why: dict[str, str] = {}
    for a in m.assets:
        v = judge(a.license)
        # Model licences (llama3, openrail, gemma) are often not open-source ones: read them.
        name = a.license or v.name
        why[name] = v.why
        groups[name].append(f"{a.kind} {a.repo_id}@{a.commit[:12]}")
    lines = [
        f"Licences of {m.name}: {len(m.assets)} models and datasets, as their cards state.",
        "",
    ]
    for name in sorted(groups, key=lambda n: (not why[n], n)):
        lines.append(f"{name}  [{why[name] or 'open source'}]")
        lines += [f"    {c}" for c in sorted(groups[name])]
    return "\n".join(lines) + "\n"
