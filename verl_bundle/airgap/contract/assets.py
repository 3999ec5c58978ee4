"""The asset bundle's manifest: models and datasets a verl run loads, pinned and hashed.

Models are gigabytes and change on another rhythm than the stack, so they travel in their own
bundle (`verl-bundle assets`), with this manifest as its contract: written by the host
(verl_bundle/assets/plan.py), read here on the server. Standard library only, Python 3.8+.
Reading is strict, as for the stack manifest: a missing or mistyped field is one ManifestError.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from verl_bundle.airgap.contract.manifest import Generated, ManifestError, Reader
from verl_bundle.airgap.contract.manifest_read import find_root as find_root
from verl_bundle.airgap.contract.manifest_read import load_with, read_generated, read_json

SCHEMA = 1  # the asset manifest schema this code writes and reads
KIND = "verl-assets"  # tells an asset bundle's manifest.json from a stack bundle's
INSTALL = "install-assets.sh"
MODELS = "models"
DATASETS = "datasets"
ASSET_KINDS = ("model", "dataset")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
# The columns verl's RL dataset reads, as verl's gsm8k/math preprocessing writes them.
VERL_COLUMNS = ("data_source", "prompt", "ability", "reward_model", "extra_info")


@dataclass(frozen=True)
class AssetFile:
    """One file of an asset in the bundle, with the repository file it came from."""

    path: str  # bundle path: models/<org>--<name>/config.json
    sha256: str
    size: int
    source: str  # the file's name in the repository ("" for a converted split)
    hash_by: str = "hub"  # "host": computed where it was fetched; the Hub stated none


@dataclass(frozen=True)
class SourceFile:
    """A repository file a converted dataset was made from (checked when it was fetched)."""

    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Asset:
    """A model or a dataset at one commit, and where its files are in the bundle."""

    kind: str  # "model" or "dataset"
    repo_id: str  # "Qwen/Qwen2.5-0.5B-Instruct"
    revision: str  # what was asked for ("main", a tag, a sha)
    commit: str  # the commit sha that revision was at
    path: str  # bundle directory: models/Qwen--Qwen2.5-0.5B-Instruct
    files: tuple[AssetFile, ...]
    splits: tuple[tuple[str, str], ...] = ()  # dataset: ("train", "train.parquet"), ("val", ...)
    converted_from: tuple[SourceFile, ...] = ()  # dataset: the repository files read
    conversion: str = ""  # dataset: "gsm8k" (converted) or "verl" (passed through)
    # The licence its card's metadata states (README.md's `license:`); "" when it states none
    # (and in bundles written before the field).
    license: str = ""

    @property
    def dirname(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def split(self, name: str) -> str | None:
        return dict(self.splits).get(name)


@dataclass(frozen=True)
class AssetsManifest:
    name: str
    created_by: str
    created: str
    assets: tuple[Asset, ...]
    generated: tuple[Generated, ...] = ()
    schema: int = SCHEMA
    kind: str = KIND

    def hashes(self) -> dict[str, str]:
        """Bundle path -> sha256 for every file the manifest lists."""
        out = {f.path: f.sha256 for a in self.assets for f in a.files}
        out.update({g.path: g.sha256 for g in self.generated})
        return out


# -- writing -------------------------------------------------------------------------------------


def to_dict(m: AssetsManifest) -> dict[str, Any]:
    return {
        "schema": m.schema,
        "kind": m.kind,
        "name": m.name,
        "created_by": m.created_by,
        "created": m.created,
        "assets": [
            {
                "kind": a.kind,
                "repo_id": a.repo_id,
                "revision": a.revision,
                "commit": a.commit,
                "path": a.path,
                "files": [
                    {
                        "path": f.path,
                        "sha256": f.sha256,
                        "size": f.size,
                        "source": f.source,
                        **({"hash_by": f.hash_by} if f.hash_by != "hub" else {}),
                    }
                    for f in a.files
                ],
                "splits": dict(a.splits),
                "converted_from": [
                    {"name": s.name, "sha256": s.sha256, "size": s.size} for s in a.converted_from
                ],
                "conversion": a.conversion,
                **({"license": a.license} if a.license else {}),
            }
            for a in m.assets
        ],
        "generated": [{"path": g.path, "sha256": g.sha256, "size": g.size} for g in m.generated],
    }


def dumps(m: AssetsManifest) -> str:
    return json.dumps(to_dict(m), indent=2) + "\n"


# -- reading -------------------------------------------------------------------------------------


def _asset(r: Reader) -> Asset:
    kind = r.text("kind")
    if kind not in ASSET_KINDS:
        raise ManifestError(f"{r.where}.kind must be model or dataset, not {kind!r}")
    commit = r.text("commit")
    if not _COMMIT.match(commit):
        raise ManifestError(f"{r.where}.commit is not a 40-digit commit sha: {commit!r}")
    path = r.path("path")
    files = []
    for i, x in enumerate(r.items("files")):
        f = Reader(x, f"{r.where}.files[{i}]")
        fpath = f.path("path")
        if not fpath.startswith(path + "/"):
            raise ManifestError(f"{f.where}.path {fpath!r} is not inside {path!r}")
        by = f.text("hash_by", "hub")
        if by not in ("hub", "host"):
            raise ManifestError(f"{f.where}.hash_by must be hub or host, not {by!r}")
        files.append(
            AssetFile(fpath, f.sha256("sha256"), f.number("size"), f.text("source", ""), by)
        )
    splits = r.table("splits", required=False)
    pairs = []
    for split in sorted(splits.data):
        name = splits.text(split)
        if f"{path}/{name}" not in {f.path for f in files}:
            raise ManifestError(f"{splits.where}.{split}: {name!r} is not a file of this asset")
        pairs.append((split, name))
    sources = tuple(
        SourceFile(s.text("name"), s.sha256("sha256"), s.number("size"))
        for s in (
            Reader(x, f"{r.where}.converted_from[{i}]")
            for i, x in enumerate(r.items("converted_from"))
        )
    )
    return Asset(
        kind=kind,
        repo_id=r.text("repo_id"),
        revision=r.text("revision"),
        commit=commit,
        path=path,
        files=tuple(files),
        splits=tuple(pairs),
        converted_from=sources,
        conversion=r.text("conversion", ""),
        license=r.text("license", ""),
    )


def from_dict(data: Any) -> AssetsManifest:
    """An AssetsManifest from the parsed JSON; ManifestError naming the first bad field."""
    if not isinstance(data, dict):
        raise ManifestError("manifest.json is not a JSON table")
    if data.get("kind") != KIND:
        raise ManifestError(
            "manifest.json is not an asset bundle's (no kind = verl-assets): "
            "is this a stack bundle? Install it with its ./install.sh"
        )
    schema = data.get("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema != SCHEMA:
        raise ManifestError(
            f"this asset bundle's manifest has schema {schema!r}; this verl-bundle reads "
            f"schema {SCHEMA}: run the bundle's own ./{INSTALL}, or rebuild it"
        )
    r = Reader(data, "manifest")
    assets = tuple(
        _asset(Reader(a, f"manifest.assets[{i}]")) for i, a in enumerate(r.items("assets"))
    )
    dirs = [a.path for a in assets]
    if len(set(dirs)) != len(dirs):
        raise ManifestError("manifest.assets: two assets share one directory")
    generated = read_generated(r)
    return AssetsManifest(
        name=r.text("name"),
        created_by=r.text("created_by", ""),
        created=r.text("created", ""),
        assets=assets,
        generated=generated,
        schema=schema,
    )


def loads(text: str) -> AssetsManifest:
    return from_dict(read_json(text))


def load(root: str) -> AssetsManifest:
    """The manifest of the asset bundle at `root`; ManifestError (one line) when unusable."""
    return load_with(root, loads)
