"""Installing an asset bundle on the server: verify, place, set the offline environment.

`python3 -m verl_bundle.airgap assets install BUNDLE_DIR --prefix DIR [--assets-dir DIR]`
checks every file against the asset manifest and SHA256SUMS while copying it, places each model
and dataset under <prefix>/assets (or a shared --assets-dir) in a directory named for its
commit, writes <prefix>/verl-env.sh (the Hugging Face offline variables, which must be set
before transformers is imported) and hooks it into the venv's bin/activate, checks readiness,
and prints the verl overrides that point at the placed files. A copy is made in a directory of
its own beside the final one (`.<commit>.partial-<host>-<random>`, held by an flock on its
`.lock` so that a later run, on any node sharing --assets-dir, removes what a killed one left
and nothing a live one is writing) and renamed only when every byte matched, so nothing
partial ever has a final name; a member that is a symbolic link or not a regular file is never
followed. The installer's record of each placed directory lives beside it
(`.<commit>.verl-asset.json`), where no file of the asset can collide with it.
Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import secrets
import shlex
import shutil
import stat
from dataclasses import dataclass
from typing import Sequence

from verl_bundle.airgap.assets.partial import claim_partial, host_name, sweep_partials
from verl_bundle.airgap.assets.ready import check_placed, readiness
from verl_bundle.airgap.checks import Check, Verdict, failures, verdict
from verl_bundle.airgap.confined import Confined
from verl_bundle.airgap.contract import assets as am
from verl_bundle.airgap.contract.hashing import CHUNK, sha256_file
from verl_bundle.airgap.contract.manifest import MANIFEST, SUMS, ManifestError
from verl_bundle.airgap.errors import EXIT_DAMAGED, EXIT_FAILED, EXIT_USAGE, ServerError
from verl_bundle.airgap.render import checks_json, checks_text
from verl_bundle.airgap.verify.bundle import parse_sums

RECORD = ".verl-asset.json"  # .<commit>.verl-asset.json beside each placed directory
INDEX = "verl-assets.json"  # in the prefix: what was placed where (for `assets check`)
ENV_FILE = "verl-env.sh"
HOOK_MARK = "# verl-bundle: offline Hugging Face settings"


class AssetsError(ServerError):
    """One line for the user, with the exit code of the one table (airgap/errors.py)."""


@dataclass(frozen=True)
class Placed:
    kind: str
    repo_id: str
    commit: str
    path: str  # the directory on the server
    files: int
    reused: bool  # an intact copy of the same commit was already there


@dataclass(frozen=True)
class AssetsResult:
    bundle: str
    prefix: str
    assets_dir: str
    placed: tuple[Placed, ...]
    env_file: str
    activate_hooked: bool
    overrides: tuple[str, ...]
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return not failures(self.checks)

    @property
    def verdict(self) -> Verdict:
        """Ready (every placed file intact, every model and dataset loads) or not (exit 5)."""
        return verdict(
            installed=(),
            readiness=self.checks,
            purpose=f"{len(self.placed)} model(s) and dataset(s) placed, intact and loadable",
        )


def _check_lists(root: str, m: am.AssetsManifest) -> None:
    """SHA256SUMS and the manifest must list the same files with the same hashes, and the
    manifest itself must match its line; the payload is hashed while it is copied."""
    try:
        with open(os.path.join(root, SUMS), encoding="utf-8") as fh:
            sums = parse_sums(fh.read())
    except OSError:
        raise AssetsError(
            f"{root}: {SUMS} is missing: the bundle is damaged", EXIT_DAMAGED
        ) from None
    if sums.get(MANIFEST) != sha256_file(os.path.join(root, MANIFEST)):
        raise AssetsError(f"{MANIFEST}: altered (does not match {SUMS})", EXIT_DAMAGED)
    listed = m.hashes()
    differ = sorted(
        p for p in set(sums) | set(listed) if p != MANIFEST and sums.get(p) != listed.get(p)
    )
    if differ:
        raise AssetsError(
            f"{SUMS} and {MANIFEST} disagree about {', '.join(differ[:5])}: the bundle is damaged",
            EXIT_DAMAGED,
        )
    for g in m.generated:
        full = os.path.join(root, g.path)
        if not os.path.isfile(full):
            raise AssetsError(f"{g.path}: missing from the bundle", EXIT_DAMAGED)
        if sha256_file(full) != g.sha256:
            raise AssetsError(f"{g.path}: altered (sha256 does not match)", EXIT_DAMAGED)


def _copy_checked(src: str, dst: str, expected: str, size: int, shown: str) -> None:
    """`src` (a regular file, never followed through a link, read to at most `size` + 1 bytes)
    into the new file `dst`, checked against `expected`."""
    h = hashlib.sha256()
    try:
        fd = os.open(src, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise AssetsError(f"{shown}: missing from the bundle", EXIT_DAMAGED) from None
    except OSError:
        fd = -1
    if fd < 0 or not stat.S_ISREG(os.fstat(fd).st_mode):
        if fd >= 0:
            os.close(fd)
        raise AssetsError(
            f"{shown}: not a regular file (a symbolic link, a device or a directory): the "
            "bundle is damaged; extract the asset tarball again",
            EXIT_DAMAGED,
        )
    done = 0
    out = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "rb") as fin, os.fdopen(out, "wb") as fout:
        while done <= size:
            chunk = fin.read(min(CHUNK, size + 1 - done))
            if not chunk:
                break
            h.update(chunk)
            fout.write(chunk)
            done += len(chunk)
    if done > size:
        raise AssetsError(
            f"{shown}: altered (longer than the {size} bytes the manifest states)", EXIT_DAMAGED
        )
    if h.hexdigest() != expected:
        raise AssetsError(
            f"{shown}: altered (sha256 {h.hexdigest()}, expected {expected})", EXIT_DAMAGED
        )


def _intact(final: str, asset: am.Asset) -> bool:
    return not check_placed(final, asset)


def record_path(directory: str) -> str:
    """Where the installer's record of a placed directory lives: beside it."""
    parent, commit = os.path.split(os.path.normpath(directory))
    return os.path.join(parent, f".{commit}{RECORD}")


def _place(root: str, asset: am.Asset, dest: str) -> Placed:
    final = os.path.join(dest, asset.path, asset.commit)
    parent = os.path.dirname(final)

    def done(reused: bool) -> Placed:
        _write_atomic(record_path(final), json.dumps(_record(asset), indent=2))
        return Placed(asset.kind, asset.repo_id, asset.commit, final, len(asset.files), reused)

    if os.path.isdir(final) and _intact(final, asset):
        return done(True)
    os.makedirs(parent, exist_ok=True)
    sweep_partials(parent, asset.commit)
    lock, tmp = claim_partial(parent, asset.commit)
    try:
        for f in asset.files:
            out = os.path.join(tmp, f.path[len(asset.path) + 1 :])
            os.makedirs(os.path.dirname(out), exist_ok=True)
            _copy_checked(os.path.join(root, f.path), out, f.sha256, f.size, f.path)
        if os.path.isdir(final) and _intact(final, asset):
            return done(True)  # another node placed it meanwhile: theirs stays
        if os.path.isdir(final):  # a damaged or older copy: swap it out
            old = tmp + "-old"
            os.replace(final, old)
            os.replace(tmp, final)
            shutil.rmtree(old, ignore_errors=True)
        else:
            try:
                os.replace(tmp, final)
            except OSError:
                if not (os.path.isdir(final) and _intact(final, asset)):
                    raise
                return done(True)  # another node's rename came first
        return done(False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        with contextlib.suppress(OSError):
            os.unlink(tmp + ".lock")
        os.close(lock)


def _record(asset: am.Asset) -> dict[str, object]:
    doc = am.to_dict(am.AssetsManifest("", "", "", (asset,)))["assets"][0]
    assert isinstance(doc, dict)
    return doc


def load_record(directory: str) -> am.Asset:
    """The asset a placed directory holds, from its record (beside it; inside it for what an
    older installer placed); ManifestError when unreadable."""
    where = record_path(directory)
    if not os.path.isfile(where) and os.path.isfile(os.path.join(directory, RECORD)):
        where = os.path.join(directory, RECORD)
    try:
        with open(where, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError) as exc:
        raise ManifestError(f"{where}: unreadable ({exc})") from None
    doc = {"schema": am.SCHEMA, "kind": am.KIND, "name": "placed", "assets": [data]}
    return am.from_dict(doc).assets[0]


def _write_atomic(path: str, text: str) -> None:
    """`path` whole or not at all: a fresh name (O_EXCL, no link followed), renamed over it."""
    tmp = f"{path}.partial-{host_name()}-{secrets.token_hex(8)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.lexists(tmp):
            os.unlink(tmp)
        raise


def env_text(prefix: str) -> str:
    home = shlex.quote(os.path.join(prefix, "hf-home"))
    return (
        "# Written by verl-bundle (assets install). Hugging Face reads these when it is\n"
        "# imported: source this file before python starts (bin/activate does).\n"
        "export HF_HUB_OFFLINE=1\n"
        "export TRANSFORMERS_OFFLINE=1\n"
        "export HF_DATASETS_OFFLINE=1\n"
        f"export HF_HOME={home}\n"
    )


def _hook_activate(prefix: Confined, env_file: str) -> bool:
    """Append one guarded line to the venv's bin/activate (once); False when there is none.
    Through the prefix's descriptor: a bin/activate that is a link is refused, not followed."""
    st = prefix.lstat("bin/activate")
    if st is None or not stat.S_ISREG(st.st_mode):
        return False
    with open(prefix.path("bin/activate"), encoding="utf-8") as fh:
        if HOOK_MARK in fh.read():
            return True
    quoted = shlex.quote(env_file)
    with prefix.append("bin/activate") as fh:
        fh.write(f"\n{HOOK_MARK}\nif [ -f {quoted} ]; then . {quoted}; fi\n")
    return True


def overrides(placed: Sequence[Placed], assets: Sequence[am.Asset]) -> tuple[str, ...]:
    """The verl command-line overrides for the first model and the first dataset."""
    out = []
    by_key = {(a.kind, a.repo_id, a.commit): a for a in assets}
    model = next((p for p in placed if p.kind == "model"), None)
    if model is not None:
        out.append(f"actor_rollout_ref.model.path={model.path}")
        out.append(f"critic.model.path={model.path}")
    data = next((p for p in placed if p.kind == "dataset"), None)
    if data is not None:
        asset = by_key[(data.kind, data.repo_id, data.commit)]
        for key, split in (("data.train_files", "train"), ("data.val_files", "val")):
            name = asset.split(split)
            if name:
                out.append(f"{key}={os.path.join(data.path, name)}")
    return tuple(out)


def install_assets(
    root: str, prefix: str, assets_dir: str | None = None, python: str | None = None
) -> AssetsResult:
    """Verify and place the asset bundle at `root` for the environment at `prefix`; write the
    environment file; check readiness with `python` (default: the prefix's venv python)."""
    root = am.find_root(root)
    if os.path.isfile(root):
        raise AssetsError(
            f"{root}: give the extracted bundle directory (tar xf it first)", EXIT_USAGE
        )
    try:
        m = am.load(root)
    except ManifestError as exc:
        raise AssetsError(str(exc), EXIT_DAMAGED if os.path.isdir(root) else EXIT_USAGE) from None
    prefix = os.path.abspath(prefix)
    dest = os.path.abspath(assets_dir) if assets_dir else os.path.join(prefix, "assets")
    _check_lists(root, m)
    try:
        os.makedirs(dest, exist_ok=True)
        placed = tuple(_place(root, a, dest) for a in m.assets)
        env_file = os.path.join(prefix, ENV_FILE)
        with Confined(prefix, make=True) as into:  # the environment's files: no link followed
            into.makedirs("hf-home")
            into.write_atomic(ENV_FILE, env_text(prefix))
            index = [
                {"kind": p.kind, "repo_id": p.repo_id, "commit": p.commit, "path": p.path}
                for p in placed
            ]
            into.write_atomic(INDEX, json.dumps(index, indent=2) + "\n")
            hooked = _hook_activate(into, env_file)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
            raise AssetsError(
                f"{exc.filename or dest}: no space left ({exc.strerror}); free space or give "
                f"--assets-dir on a larger filesystem, then run again",
                EXIT_FAILED,
            ) from None
        raise AssetsError(f"{exc.filename or dest}: {exc.strerror or exc}", EXIT_FAILED) from None
    exe = python or os.path.join(prefix, "bin", "python")
    checks = readiness(
        [(p.path, a) for p, a in zip(placed, m.assets)],
        exe if os.path.exists(exe) else None,
        prefix,
    )
    return AssetsResult(
        bundle=m.name,
        prefix=prefix,
        assets_dir=dest,
        placed=placed,
        env_file=env_file,
        activate_hooked=hooked,
        overrides=overrides(placed, m.assets),
        checks=tuple(checks),
    )


def check_prefix(prefix: str, python: str | None = None) -> AssetsResult:
    """Readiness of what an earlier install placed for `prefix` (read from its index)."""
    prefix = os.path.abspath(prefix)
    where = os.path.join(prefix, INDEX)
    try:
        with open(where, encoding="utf-8") as fh:
            index = json.load(fh)
        dirs = [str(row["path"]) for row in index]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise AssetsError(
            f"{where}: no placed assets recorded ({exc}); run assets install", EXIT_USAGE
        ) from None
    pairs = []
    for d in dirs:
        try:
            asset = load_record(d)
        except ManifestError as exc:
            raise AssetsError(f"{exc}: install the asset bundle again", EXIT_DAMAGED) from None
        pairs.append(
            (Placed(asset.kind, asset.repo_id, asset.commit, d, len(asset.files), True), asset)
        )
    exe = python or os.path.join(prefix, "bin", "python")
    checks = readiness(
        [(p.path, a) for p, a in pairs], exe if os.path.exists(exe) else None, prefix
    )
    placed = tuple(p for p, _ in pairs)
    return AssetsResult(
        bundle="",
        prefix=prefix,
        assets_dir=os.path.dirname(os.path.commonpath(dirs)) if dirs else "",
        placed=placed,
        env_file=os.path.join(prefix, ENV_FILE),
        activate_hooked=False,
        overrides=overrides(placed, [a for _, a in pairs]),
        checks=tuple(checks),
    )


def result_json(r: AssetsResult) -> dict[str, object]:
    return {
        "bundle": r.bundle,
        "prefix": r.prefix,
        "assets_dir": r.assets_dir,
        "placed": [
            {
                "kind": p.kind,
                "repo_id": p.repo_id,
                "commit": p.commit,
                "path": p.path,
                "files": p.files,
                "reused": p.reused,
            }
            for p in r.placed
        ],
        "env_file": r.env_file,
        "activate_hooked": r.activate_hooked,
        "overrides": list(r.overrides),
        "checks": checks_json(r.checks),
    }


def result_text(r: AssetsResult) -> str:
    lines = []
    for p in r.placed:
        how = "already in place" if p.reused else "placed"
        lines.append(f"{how}: {p.kind} {p.repo_id}@{p.commit[:12]} -> {p.path}")
    hooked = f" (sourced by {r.prefix}/bin/activate)" if r.activate_hooked else ""
    lines.append(f"environment: {r.env_file}{hooked}")
    lines += ["", checks_text(r.checks, "ready" if r.ok else "NOT READY"), ""]
    lines.append("verl overrides:")
    lines.append(" ".join(shlex.quote(o) for o in r.overrides))
    return "\n".join(lines)
