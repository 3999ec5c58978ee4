"""The bundle's manifest: the one contract between the online host and the server.

Typed, frozen values with a schema version. The host's bundle stage builds a `Manifest` and
writes it with `dumps`; every server tool (verify, doctor, install, postinstall) and rehearse
read it with `load`. Nothing else parses manifest.json. Standard library only, Python 3.8+.

The values live in `manifest_values`, the strict reader in `manifest_read` and the writer in
`manifest_write`; this module gathers them, so importers use one name: `manifest.load`,
`manifest.dumps`, `manifest.Manifest`.
"""

from __future__ import annotations

# The asset bundle's manifest (airgap/contract/assets.py) shares the typed table reader `Reader`.
from verl_bundle.airgap.contract.manifest_read import Reader as Reader
from verl_bundle.airgap.contract.manifest_read import find_root, from_dict, iter_paths, load, loads
from verl_bundle.airgap.contract.manifest_values import (
    BOOTSTRAP,
    BOOTSTRAP_PHASE,
    DOCTOR,
    INSTALL,
    INTERPRETER,
    KINDS,
    LIB,
    LICENSES,
    LOCK,
    MANIFEST,
    README,
    REQUIREMENTS,
    SBOM,
    SCHEMA,
    SIGNATURE,
    SIGNATURE_GPG,
    SIGNING_NAMESPACE,
    SOURCES,
    SUMS,
    WHEELS,
    BuildTime,
    BuiltFrom,
    Checks,
    Compiled,
    Delta,
    File,
    Generated,
    Interpreter,
    Manifest,
    ManifestError,
    MaxJobs,
    Phase,
    ProfileInfo,
    Readiness,
    SourceBuild,
    Target,
    Toolchain,
    canonical,
)
from verl_bundle.airgap.contract.manifest_write import dumps, to_dict

__all__ = [
    "BOOTSTRAP",
    "BOOTSTRAP_PHASE",
    "DOCTOR",
    "INSTALL",
    "INTERPRETER",
    "KINDS",
    "LIB",
    "LICENSES",
    "LOCK",
    "MANIFEST",
    "README",
    "REQUIREMENTS",
    "SBOM",
    "SCHEMA",
    "SIGNATURE",
    "SIGNATURE_GPG",
    "SIGNING_NAMESPACE",
    "SOURCES",
    "SUMS",
    "WHEELS",
    "BuildTime",
    "BuiltFrom",
    "Checks",
    "Compiled",
    "Delta",
    "File",
    "Generated",
    "Interpreter",
    "Manifest",
    "ManifestError",
    "MaxJobs",
    "Phase",
    "ProfileInfo",
    "Readiness",
    "SourceBuild",
    "Target",
    "Toolchain",
    "canonical",
    "dumps",
    "find_root",
    "from_dict",
    "iter_paths",
    "load",
    "loads",
    "to_dict",
]
