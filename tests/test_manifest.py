"""The manifest contract: every value written is read back, and the strict reader names what is
wrong in one line (a newer schema, a mistyped field, a path that leaves the bundle)."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from test_server_program import STANDALONE

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.bundle.entries import airgap_entries

PY38 = Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python3.8"
SHA = "a" * 64


def _file(path: str, name: str, version: str, sha256: str, size: int, **more: Any) -> mf.File:
    """A wheel in the phase of its own name, with no URL, unless `more` says otherwise."""
    fields: dict[str, Any] = {"location": "default", "url": "", "phase": name, "kind": "wheel"}
    return mf.File(path, name, version, sha256, size, **{**fields, **more})


def full() -> mf.Manifest:
    """A manifest with every value set, so that a field the writer or reader drops shows."""
    build = mf.SourceBuild(
        package="flash-attn",
        env=(("FLASH_ATTENTION_FORCE_BUILD", "TRUE"), ("NVCC_THREADS", "2")),
        max_jobs=mf.MaxJobs(gib_per_job=12.0, limit=4),
        needs_cuda=True,
        build_time=mf.BuildTime(100.0, ("8.0", "9.0")),
    )
    return mf.Manifest(
        name="verl-bundle-cu121-cp310-manylinux_2_17_x86_64",
        created_by="verl-bundle 0.2.0",
        created="2026-11-30T00:00:00Z",
        profile=mf.ProfileInfo("cu121", "CUDA 12.1 stack", SHA, ("a note",)),
        target=mf.Target("3.10", "cp310", "manylinux_2_17_x86_64", "x86_64", "2.17", "12.1"),
        toolchain=mf.Toolchain(nvcc=">=12.1", gcc="<13", driver=">=530", driver_compat="12.x"),
        checks=mf.Checks(("torch", "verl"), "2.5.1", "12.1", "flash_attn-2.7.3.whl"),
        phases=(
            mf.Phase("torch", "requirements/01-torch.txt", ("torch==2.5.1",)),
            mf.Phase(
                "flash-attn", "requirements/02-flash-attn.txt", ("flash-attn==2.7.3",), (build,)
            ),
        ),
        files=(
            _file(
                "wheels/torch-2.5.1-cp310-cp310-manylinux_2_17_x86_64.whl",
                *("torch", "2.5.1", SHA, 10),
                location="pytorch-cu121",
                url="https://download.example/torch.whl",
            ),
            _file(
                "wheels/flash_attn-2.7.3-cp310-cp310-linux_x86_64.whl",
                *("flash-attn", "2.7.3", "b" * 64, 20),
                location="host-built",
                built_from=mf.BuiltFrom("sources/flash_attn-2.7.3.tar.gz", "c" * 64),
                compiled=mf.Compiled("nvcc 12.1.105", "gcc 12.2.0", "8.0;9.0", 812.5, "k1"),
            ),
            _file(
                "bootstrap/pip-24.0-py3-none-any.whl",
                *("pip", "24.0", "d" * 64, 30),
                phase=mf.BOOTSTRAP_PHASE,
                kind="bootstrap",
            ),
        ),
        generated=(mf.Generated("install.sh", "e" * 64, 40),),
        installed_size=1234,
        readiness=mf.Readiness(modules=("verl.trainer.main_ppo",), limit="a known limit"),
        interpreter=mf.Interpreter(
            path="python/cpython-3.10.15+20241016-x86_64-unknown-linux-gnu-install_only.tar.gz",
            version="3.10.15",
            sha256="f" * 64,
            size=50,
            arch="x86_64",
            libc="gnu",
            release="20241016",
            location="python-build-standalone",
            url="https://releases.example/20241016/cpython.tar.gz",
        ),
    )


def doc() -> dict[str, Any]:
    return copy.deepcopy(mf.to_dict(full()))


def test_every_value_round_trips_through_the_json() -> None:
    m = full()
    assert mf.loads(mf.dumps(m)) == m
    assert mf.from_dict(json.loads(mf.dumps(m))).source_builds[0].environ == {
        "FLASH_ATTENTION_FORCE_BUILD": "TRUE",
        "NVCC_THREADS": "2",
    }


def test_a_bundle_written_before_the_interpreter_field_still_reads() -> None:
    """Schema-2 bundles without `interpreter` read as carrying none; one that carries it lists
    its archive among the files every check hashes."""
    old = doc()
    del old["interpreter"]
    m = mf.from_dict(old)
    assert m.interpreter is None
    assert "interpreter" not in mf.to_dict(m)  # and a bundle without one writes no key
    assert full().hashes()[str(full().interpreter.path)] == "f" * 64  # type: ignore[union-attr]
    assert full().interpreter.path in mf.iter_paths(full())  # type: ignore[union-attr]


def test_a_source_build_without_a_build_time_reads_as_none() -> None:
    """Bundles written before the field (schema 2 all the same) still read."""
    data = doc()
    del data["phases"][1]["source_builds"][0]["build_time"]
    (build,) = mf.from_dict(data).source_builds
    assert build.build_time is None and build.max_jobs.gib_per_job == 12.0


def test_a_delta_and_the_licences_round_trip_and_older_bundles_read_without_them() -> None:
    """A delta bundle's base and each file's licence are optional fields of schema 2: written
    only when set, read back as written, absent in older bundles."""
    import dataclasses

    base = full()
    files = (dataclasses.replace(base.files[0], license="BSD-3-Clause"), *base.files[1:])
    delta = mf.Delta("verl-bundle-cu121-old", "9" * 64, (files[0].path,))
    m = dataclasses.replace(base, files=files, delta=delta)
    assert mf.loads(mf.dumps(m)) == m
    assert m.omitted_files() == (files[0],) and base.omitted_files() == ()
    written = doc()
    assert "delta" not in written and all("license" not in f for f in written["files"])
    assert mf.from_dict(written).delta is None and mf.from_dict(written).files[0].license == ""


@pytest.mark.parametrize(
    ("omitted", "says"),
    [
        ("wheels/nowhere-1.0-py3-none-any.whl", r"delta\.omitted\[0\]: .* is not a file of"),
        ("../outside.whl", r"manifest\.delta\.omitted\[0\]"),
        (7, r"delta\.omitted\[0\] must be a string"),
    ],
)
def test_a_bad_delta_is_named(omitted: object, says: str) -> None:
    data = doc()
    data["delta"] = {"base": "old", "base_manifest": "9" * 64, "omitted": [omitted]}
    with pytest.raises(mf.ManifestError, match=says):
        mf.from_dict(data)


def test_public_names_stay_importable_from_manifest() -> None:
    """Importers use `manifest.NAME`; the split into reader and writer modules keeps them."""
    for name in mf.__all__:
        assert getattr(mf, name) is not None, name
    assert mf.load.__module__ == "verl_bundle.airgap.contract.manifest_read"
    assert mf.dumps.__module__ == "verl_bundle.airgap.contract.manifest_write"


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        (3, r"schema 3, newer than this verl-bundle reads \(up to 2\)"),
        (1, r"schema 1, older than this verl-bundle reads \(2\)"),
        ("2", r"no schema number"),
    ],
)
def test_a_schema_it_cannot_read_is_one_line(schema: object, says: str) -> None:
    data = dict(doc(), schema=schema)
    with pytest.raises(mf.ManifestError, match=says) as err:
        mf.from_dict(data)
    assert "\n" not in str(err.value)


def _broken(change: str) -> dict[str, Any]:
    data = doc()
    if change == "size":
        data["files"][0]["size"] = -1
    elif change == "sha":
        data["files"][0]["sha256"] = "not-a-digest"
    elif change == "kind":
        data["files"][0]["kind"] = "egg"
    elif change == "phase":
        data["files"][0]["phase"] = "nowhere"
    elif change == "twice":
        data["phases"].append(data["phases"][0])
    elif change == "env":
        data["phases"][1]["source_builds"][0]["env"] = {"BAD NAME": "x"}
    elif change == "target":
        del data["target"]["cuda"]
    elif change == "seconds":
        data["files"][1]["compiled"]["seconds"] = "long"
    elif change == "interpreter":
        data["interpreter"]["path"] = "../cpython.tar.gz"
    elif change == "build_time":
        data["phases"][1]["source_builds"][0]["build_time"]["core_minutes_per_arch"] = 0
    return data


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ("size", r"manifest\.files\[0\]\.size must be a whole number"),
        ("sha", r"manifest\.files\[0\]\.sha256 is not a sha256 digest"),
        ("kind", r"manifest\.files\[0\]\.kind must be one of wheel, build-dep"),
        ("phase", r"is in phase 'nowhere', which is not a phase of this bundle"),
        ("twice", r"phase 'torch' is listed twice"),
        ("env", r"env\.BAD NAME must be NAME = \"string\""),
        ("target", r"manifest\.target\.cuda is missing"),
        ("seconds", r"manifest\.files\[1\]\.compiled\.seconds must be a number"),
        ("interpreter", r"manifest\.interpreter\.path"),
        ("build_time", r"build_time\.core_minutes_per_arch must be a positive number"),
    ],
)
def test_a_bad_field_is_named(change: str, says: str) -> None:
    with pytest.raises(mf.ManifestError, match=says):
        mf.from_dict(_broken(change))


@pytest.mark.parametrize("path", ["../etc/passwd", "/etc/passwd", "wheels/../../x.whl"])
def test_a_path_that_leaves_the_bundle_is_refused(path: str) -> None:
    data = doc()
    data["files"][0]["path"] = path
    with pytest.raises(mf.ManifestError, match=r"manifest\.files\[0\]\.path"):
        mf.from_dict(data)


def test_load_finds_the_one_bundle_inside_a_folder_and_names_a_missing_file(
    tmp_path: Path,
) -> None:
    root = tmp_path / "unpacked" / "verl-bundle-cu121"
    root.mkdir(parents=True)
    (root / mf.MANIFEST).write_text(mf.dumps(full()))
    (root / mf.SUMS).write_text("")
    assert mf.load(str(tmp_path / "unpacked")) == full()
    (root / mf.MANIFEST).write_text("{")
    with pytest.raises(mf.ManifestError, match=r"manifest\.json: manifest\.json is not valid JSON"):
        mf.load(str(root))
    with pytest.raises(mf.ManifestError, match=r"cannot read .*empty/manifest\.json"):
        mf.load(str(tmp_path / "empty"))


def _lay_out_lib(root: Path) -> Path:
    """The bundle's lib/ under `root`, as the bundle stage lays it out; its path."""
    for entry in airgap_entries():
        assert entry.data is not None
        target = root / entry.arcname
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(entry.data)
    return root / "lib"


@pytest.mark.skipif(not PY38.exists(), reason="needs a Python 3.8 under ~/.pyenv")
def test_the_bundled_reader_and_writer_run_on_python38(tmp_path: Path) -> None:
    """The bundle's lib/ (as the bundle stage lays it out) carries the reader and the writer,
    and they round-trip on the oldest server Python with nothing but the standard library."""
    _lay_out_lib(tmp_path)
    assert (tmp_path / "lib/verl_bundle/airgap/contract/manifest_read.py").is_file()
    (tmp_path / "manifest.json").write_text(mf.dumps(full()))
    script = (
        "import sys; from verl_bundle.airgap.contract import manifest as mf; "
        "m = mf.load(sys.argv[1]); assert mf.loads(mf.dumps(m)) == m; "
        "print(m.files[1].compiled.archs, len(m.phases), m.interpreter.version)"
    )
    out = subprocess.run(
        [
            str(PY38),
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(tmp_path / 'lib')!r}); {script}",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["8.0;9.0", "2", "3.10.15"]


@pytest.mark.skipif(not PY38.exists(), reason="needs a Python 3.8 under ~/.pyenv")
def test_each_server_module_imports_alone_on_python38(tmp_path: Path) -> None:
    """Any server module may be the first one imported (manifest_read before manifest was a
    circular import): each alone, in a fresh Python 3.8, from the bundle's lib/."""
    lib = _lay_out_lib(tmp_path)
    modules = sorted(
        ".".join(p.relative_to(lib).with_suffix("").parts).removesuffix(".__init__")
        for p in (lib / "verl_bundle" / "airgap").rglob("*.py")
        if p.stem != "__main__"  # importing it runs the command line
    )
    assert "verl_bundle.airgap.contract.manifest_read" in modules and len(modules) > 30
    failed = {}
    for module in modules:
        # A standalone script (run by path, its siblings on PYTHONPATH) is imported as it runs:
        # with its own directory on the path too, after the script's own place.
        rel = "/".join(module.split(".")[2:]) + ".py"
        own = str(lib.joinpath(*module.split(".")[:-1])) if rel in STANDALONE else ""
        path = f"sys.path.append({own!r}); " if own else ""
        proc = subprocess.run(
            [
                str(PY38),
                "-I",
                "-B",
                "-c",
                f"import sys; sys.path.insert(0, {str(lib)!r}); {path}import {module}",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode != 0:
            failed[module] = (proc.stderr.strip().splitlines() or ["?"])[-1]
    assert failed == {}
