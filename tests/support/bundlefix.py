"""Changing an extracted bundle the way a rebuilt one would differ: a wheel at another version,
a wheel with many files, a package gone. The manifest, the requirements and SHA256SUMS are
made consistent again, so the bundle verifies and only its content differs."""

from __future__ import annotations

import base64
import hashlib
import json
import re
import zipfile
from pathlib import Path

from support.airgap import resign


def _record(files: dict[str, bytes], info: str) -> bytes:
    lines = []
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        lines.append(f"{name},sha256={digest},{len(data)}")
    lines.append(f"{info}/RECORD,,")
    return ("\n".join(lines) + "\n").encode()


def rewrap(wheel: Path, dest: Path, version: str | None = None, bulk: int = 0) -> Path:
    """A copy of `wheel` in `dest`, at `version` and/or with `bulk` extra 1 KiB files in its
    package (a wheel that takes a while to unpack, like torch)."""
    dist, old = wheel.name.split("-")[:2]
    new = version or old
    files: dict[str, bytes] = {}
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.endswith(".dist-info/RECORD"):
                continue
            data = zf.read(name)
            if name.endswith(".dist-info/METADATA"):
                data = re.sub(rb"(?m)^Version: .*$", f"Version: {new}".encode(), data)
            files[name.replace(f"{dist}-{old}.dist-info/", f"{dist}-{new}.dist-info/")] = data
    top = next(n.split("/")[0] for n in files if "/" in n and ".dist-info/" not in n)
    for i in range(bulk):
        files[f"{top}/_bulk/f{i:05d}.bin"] = hashlib.sha256(str(i).encode()).digest() * 32
    info = f"{dist}-{new}.dist-info"
    files[f"{info}/RECORD"] = _record(files, info)
    out = dest / wheel.name.replace(f"{dist}-{old}-", f"{dist}-{new}-")
    dest.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return out


def replace_wheel(root: Path, name: str, version: str | None = None, bulk: int = 0) -> Path:
    """Swap the bundle's wheel of `name` for a rewrapped one; the bundle stays consistent."""
    manifest = json.loads((root / "manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["name"] == name)
    old: Path = root / str(entry["path"])
    new = rewrap(old, root / "tmp-rewrap", version, bulk)
    old.unlink()
    final = old.parent / new.name
    new.rename(final)
    (root / "tmp-rewrap").rmdir()
    digest = hashlib.sha256(final.read_bytes()).hexdigest()
    new_version = version or entry["version"]
    phase = next(p for p in manifest["phases"] if p["name"] == entry["phase"])
    req = root / phase["requirements"]
    lines = [
        f"{name}=={new_version} --hash=sha256:{digest}" if line.startswith(f"{name}==") else line
        for line in req.read_text().splitlines()
    ]
    req.write_text("\n".join(lines) + "\n")
    phase["packages"] = [
        f"{name}=={new_version}" if p.startswith(f"{name}==") else p for p in phase["packages"]
    ]
    entry["path"], entry["version"] = f"wheels/{final.name}", new_version
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    resign(root)
    return final


def drop_package(root: Path, name: str) -> None:
    """Take a package out of the bundle (a rebuilt bundle that no longer has it)."""
    manifest = json.loads((root / "manifest.json").read_text())
    entry = next(f for f in manifest["files"] if f["name"] == name)
    (root / entry["path"]).unlink()
    manifest["files"].remove(entry)
    phase = next(p for p in manifest["phases"] if p["name"] == entry["phase"])
    phase["packages"] = [p for p in phase["packages"] if not p.startswith(f"{name}==")]
    req = root / phase["requirements"]
    lines = [ln for ln in req.read_text().splitlines() if not ln.startswith(f"{name}==")]
    req.write_text("\n".join(lines) + "\n")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    resign(root)


def add_wheel(root: Path, wheel: Path, phase: str) -> Path:
    """Add a wheel to the bundle's `phase` (a rebuilt bundle with one more package)."""
    manifest = json.loads((root / "manifest.json").read_text())
    dist, version = wheel.name.split("-")[:2]
    name = re.sub(r"[-_.]+", "-", dist).lower()
    final = root / "wheels" / wheel.name
    final.write_bytes(wheel.read_bytes())
    digest = hashlib.sha256(final.read_bytes()).hexdigest()
    manifest["files"].append(
        {
            "path": f"wheels/{final.name}",
            "name": name,
            "version": version,
            "sha256": digest,
            "size": final.stat().st_size,
            "location": "pypi",
            "url": f"https://files.example/{final.name}",
            "phase": phase,
            "kind": "wheel",
        }
    )
    entry = next(p for p in manifest["phases"] if p["name"] == phase)
    entry["packages"] = [*entry["packages"], f"{name}=={version}"]
    req = root / entry["requirements"]
    req.write_text(req.read_text() + f"{name}=={version} --hash=sha256:{digest}\n")
    (root / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    resign(root)
    return final


def add_server_program(root: Path) -> Path:
    """The server program every bundle carries (lib/verl_bundle/airgap, as the build writes
    it) in a test's bundle directory `root`, which a manifest alone does not make."""
    from verl_bundle.bundle.entries import airgap_entries

    for entry in airgap_entries():
        dest = root / entry.arcname
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(entry.data or b"")
    return root
