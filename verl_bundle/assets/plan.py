"""`verl-bundle assets`: models and datasets into one asset bundle for the air gap.

Models are gigabytes and change on another rhythm than the stack, so they travel in their own
tarball (verl-assets-<slug>.tar + .sha256) rather than inside every stack bundle: a new model
does not mean a new stack, and a stack fix does not mean carrying the weights again. The tar is
written the way the stack bundle is (streamed from the cache, temporary name, atomic rename),
with its own typed manifest (verl_bundle/airgap/contract/assets.py), SHA256SUMS listing every file,
install-assets.sh, and the standard-library server code under lib/.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from verl_bundle import __version__
from verl_bundle.airgap.contract import assets as am
from verl_bundle.airgap.contract.manifest import LICENSES, MANIFEST, SBOM, SUMS, Generated
from verl_bundle.airgap.contract.names import UnsafeNameError, bundle_path
from verl_bundle.assets import sbom as assets_sbom
from verl_bundle.assets.convert import convert
from verl_bundle.assets.fetch import AssetSpec, Fetched, Hub, fetch
from verl_bundle.bundle.entries import Entry, airgap_entries, made_here
from verl_bundle.bundle.tarball import Bundle, check_output_dir, write_bundle
from verl_bundle.errors import FetchError, UsageError
from verl_bundle.progress import Reporter
from verl_bundle.resources import data_dir


@dataclass(frozen=True)
class AssetsRequest:
    specs: tuple[AssetSpec, ...]
    hub: Hub
    output: Path
    allow: tuple[str, ...] = ()
    deny: tuple[str, ...] = ()


@dataclass(frozen=True)
class AssetsBuilt:
    bundle: Bundle
    manifest: am.AssetsManifest
    notes: tuple[str, ...] = field(default=())
    # Files the Hub stated no hash for (REPO/PATH), models' and datasets' alike: hashed here, so
    # pinned as they were served, altered or not.
    unhashed: tuple[str, ...] = ()


def _dirname(repo_id: str) -> str:
    """The hub cache's spelling of a repository as one folder name: org--name."""
    return repo_id.replace("/", "--")


def slug(fetched: list[Fetched]) -> str:
    names = "_".join(f.spec.repo_id.rsplit("/", 1)[-1] for f in fetched)
    names = re.sub(r"[^A-Za-z0-9._-]+", "-", names)[:80].strip("-.") or "assets"
    pins = "\n".join(f"{f.spec.kind} {f.spec.repo_id} {f.commit}" for f in fetched)
    return f"{names}-{hashlib.sha256(pins.encode()).hexdigest()[:8]}"


def _model(f: Fetched) -> tuple[am.Asset, list[Entry]]:
    base = f"{am.MODELS}/{_dirname(f.spec.repo_id)}"
    entries, files = [], []
    for x in f.files:
        try:
            arc = bundle_path(f"{base}/{x.name}", f"{f.spec.label}: file {x.name!r}")
        except UnsafeNameError as exc:
            raise FetchError(str(exc)) from None
        entries.append(Entry(arc, x.sha256, x.size, source=str(x.path)))
        files.append(am.AssetFile(arc, x.sha256, x.size, x.name, "hub" if x.hub_stated else "host"))
    asset = am.Asset(
        "model",
        f.spec.repo_id,
        f.spec.revision,
        f.commit,
        base,
        tuple(files),
        license=card_license(f),
    )
    return asset, entries


def _dataset(f: Fetched, work: Path) -> tuple[am.Asset, list[Entry]]:
    base = f"{am.DATASETS}/{_dirname(f.spec.repo_id)}"
    done = convert(f.spec.repo_id, list(f.files), work / f"{_dirname(f.spec.repo_id)}-{f.commit}")
    entries, files = [], []
    for name, path in done.files:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        size = path.stat().st_size
        entries.append(Entry(f"{base}/{name}", digest, size, source=str(path)))
        files.append(am.AssetFile(f"{base}/{name}", digest, size, ""))
    asset = am.Asset(
        "dataset",
        f.spec.repo_id,
        f.spec.revision,
        f.commit,
        base,
        tuple(files),
        splits=done.splits,
        converted_from=tuple(am.SourceFile(s.name, s.sha256, s.size) for s in done.sources),
        conversion=done.conversion,
        license=card_license(f),
    )
    return asset, entries


def card_license(f: Fetched) -> str:
    """The licence the repository's card states in its metadata (README.md's YAML front
    matter, `license: apache-2.0` or a list of them), "" when it states none or was not
    fetched."""
    card = next((x for x in f.files if x.name == "README.md"), None)
    if card is None:
        return ""
    try:
        text = Path(card.path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    if not text.startswith("---"):
        return ""
    front = text[3:].split("\n---", 1)[0]
    found: list[str] = []
    lines = front.splitlines()
    for i, line in enumerate(lines):
        key, _, value = line.partition(":")
        if key.strip() != "license" or line[:1].isspace():
            continue
        if value.strip():
            found.append(value.strip().strip("'\""))
        for item in lines[i + 1 :]:  # a YAML list under the key
            if not item.lstrip().startswith("- "):
                break
            found.append(item.lstrip()[2:].strip().strip("'\""))
    return " OR ".join(found)


def plan(fetched: list[Fetched], work: Path) -> tuple[str, list[Entry], am.AssetsManifest]:
    """Every entry of the asset bundle with its hash, and the manifest, before writing."""
    name = f"verl-assets-{slug(fetched)}"
    assets, payload = [], []
    for f in fetched:
        asset, entries = _model(f) if f.spec.kind == "model" else _dataset(f, work)
        assets.append(asset)
        payload += entries
    script = (data_dir("templates") / am.INSTALL).read_bytes()
    generated = [made_here(am.INSTALL, script), *airgap_entries()]
    manifest = am.AssetsManifest(
        name=name,
        created_by=f"verl-bundle {__version__}",
        created=datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        assets=tuple(assets),
    )
    generated += [
        made_here(SBOM, assets_sbom.document(manifest)),
        made_here(LICENSES, assets_sbom.report(manifest).encode()),
    ]
    manifest = dataclasses.replace(
        manifest, generated=tuple(Generated(e.arcname, e.sha256, e.size) for e in generated)
    )
    everything = [made_here(MANIFEST, am.dumps(manifest).encode()), *generated, *payload]
    sums = "".join(
        f"{e.sha256}  {e.arcname}\n" for e in sorted(everything, key=lambda e: e.arcname)
    )
    return name, [made_here(SUMS, sums.encode()), *everything], manifest


def patterns_for(spec: AssetSpec, patterns: tuple[str, ...]) -> list[str]:
    """The patterns for one repository: plain ones apply to every repository, `ID:PATTERN`
    to that one only (`--allow openai/gsm8k:main/*` picks one configuration of a dataset)."""
    out = []
    for pattern in patterns:
        repo, sep, rest = pattern.partition(":")
        if not sep:
            out.append(pattern)
        elif repo == spec.repo_id:
            out.append(rest)
    return out


def build_assets(req: AssetsRequest, reporter: Reporter) -> AssetsBuilt:
    """Fetch every model and dataset, convert the datasets, write the asset bundle."""
    if not req.specs:
        raise UsageError("verl-bundle assets: give at least one --model or --dataset")
    seen = [(s.kind, s.repo_id) for s in req.specs]
    if len(set(seen)) != len(seen):
        raise UsageError("verl-bundle assets: a repository is given twice")
    check_output_dir(req.output)
    ids = {s.repo_id for s in req.specs}
    for pattern in (*req.allow, *req.deny):
        if ":" in pattern and pattern.split(":", 1)[0] not in ids:
            raise UsageError(f"pattern {pattern!r} names a repository that is not fetched")
    fetched = [
        fetch(s, req.hub, patterns_for(s, req.allow), patterns_for(s, req.deny), reporter)
        for s in req.specs
    ]
    name, entries, manifest = plan(fetched, req.hub.cache_dir / "verl-converted")
    bundle = write_bundle(name, entries, req.output, "none", reporter)
    unhashed = tuple(
        f"{f.spec.repo_id}/{x.name}" for f in fetched for x in f.files if not x.hub_stated
    )
    notes = (unstated_warning(unhashed),) if unhashed else ()
    return AssetsBuilt(bundle, manifest, notes, unhashed)


def unstated_warning(unhashed: tuple[str, ...]) -> str:
    """The warning for files no stated hash checks (a mirror that lists none, a Hub file
    without LFS metadata): named, since what was served is what gets pinned."""
    shown = ", ".join(unhashed[:5]) + (
        f" and {len(unhashed) - 5} more" if len(unhashed) > 5 else ""
    )
    return (
        f"warning: the Hub stated no hash for {len(unhashed)} file(s), so nothing checked them "
        f"as they were fetched: {shown}. They are hashed here and pinned as served (an altered "
        "file would be pinned as if approved); compare them with the publisher's copy"
    )
