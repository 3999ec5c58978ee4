"""build --with-python: a relocatable CPython from a (fake) python-build-standalone release on
127.0.0.1, fetched with its hash through --mirror, checked to fit the bundle, carried in the
manifest and SHA256SUMS; an archive for another architecture, libc or glibc is refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from conftest import Stack
from support.cli import run
from support.cpython import (
    PLATFORM,
    Archive,
    PythonBundle,
    archive_name,
    patched,
    publish,
    python_profile,
    runs_moved,
)
from support.pkgindex import Server

from verl_bundle.airgap.contract import manifest as mf
from verl_bundle.airgap.verify.bundle import verify_dir
from verl_bundle.errors import ProfileError
from verl_bundle.fetch.standalone import (
    InterpreterError,
    check_fits,
    check_name,
    inspect_archive,
)
from verl_bundle.profile.load import load_profile
from verl_bundle.profile.target import Target

pytestmark = pytest.mark.slow

TARGET = Target((3, 10), PLATFORM)


def test_the_archive_runs_moved_with_the_original_hidden(
    cpython_archive: Archive, tmp_path: Path
) -> None:
    """The proof the fixture is a relocatable interpreter: unpacked elsewhere, with the pyenv
    installation it came from hidden, it runs, finds its own prefix and headers, makes a venv."""
    code = (
        "import sys, sysconfig, ssl, sqlite3, ctypes, venv; "
        "print(sys.prefix); print(sysconfig.get_paths()['include']); "
        "venv.create(sys.prefix + '/../v', with_pip=False); print('venv')"
    )
    proc = runs_moved(cpython_archive.path, tmp_path / "moved", cpython_archive.original, code)
    assert proc.returncode == 0, proc.stderr
    prefix, include, made = proc.stdout.split()
    assert prefix == str(tmp_path / "moved" / "python")
    assert Path(include, "Python.h").is_file() and include.startswith(prefix)
    assert made == "venv" and (tmp_path / "moved" / "v" / "bin" / "python").exists()


def test_build_carries_the_interpreter_in_the_manifest_and_sums(
    python_bundle: PythonBundle, cpython_archive: Archive
) -> None:
    _, root, doc, release_url = python_bundle
    m = mf.load(str(root))
    assert m.interpreter is not None
    assert m.interpreter.path == f"python/{cpython_archive.filename}"
    assert m.interpreter.version == cpython_archive.version
    assert m.interpreter.sha256 == cpython_archive.sha256
    assert (m.interpreter.arch, m.interpreter.libc) == ("x86_64", "gnu")
    assert m.interpreter.url.startswith(release_url)  # --mirror rewrote the location
    sums = (root / mf.SUMS).read_text()
    assert f"{cpython_archive.sha256}  python/{cpython_archive.filename}\n" in sums
    assert hashlib.sha256((root / m.interpreter.path).read_bytes()).hexdigest() == (
        cpython_archive.sha256
    )
    assert verify_dir(str(root)).ok
    assert doc["interpreter"] == {
        "path": m.interpreter.path,
        "version": cpython_archive.version,
        "sha256": cpython_archive.sha256,
        "size": m.interpreter.size,
    }
    install_sh = (root / mf.INSTALL).read_text()
    assert f"PY_SHA256={cpython_archive.sha256}" in install_sh


def test_an_archive_needing_a_newer_glibc_is_refused_in_one_line(
    stack: Stack,
    release_host: Server,
    cpython_archive: Archive,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The profile's own platform (manylinux_2_17) promises less than this machine's CPython
    needs: refused in one line, no tarball."""
    profile = python_profile(tmp_path, cpython_archive.version)
    out = tmp_path / "out"
    args = stack.args("build", out, tmp_path / "c", "--profile", str(profile))
    args += ["--mirror", f"python-build-standalone={release_host.url}"]
    result = run(args, capsys)
    assert result.code == 1, result.err
    line = result.err.strip().splitlines()[-1]
    assert line.startswith(f"error: --with-python: {cpython_archive.filename} does not fit")
    assert "newer than the 2.17 of manylinux_2_17_x86_64" in line
    assert not out.exists() or list(out.iterdir()) == []
    # --no-with-python builds the profile without it (it asked for one by default).
    stack.reset()
    release_host.clear()
    no = run([*args, "--no-with-python", "--json"], capsys)
    assert no.code == 0, no.err
    assert json.loads(no.out)["result"]["interpreter"] is None
    assert release_host.file_requests() == []


@pytest.mark.parametrize(
    ("name", "says"),
    [
        (
            archive_name("3.10.13", arch="aarch64"),
            "is CPython 3.10 for aarch64-linux-gnu, but the bundle is for cp310",
        ),
        (archive_name("3.11.7"), "is CPython 3.11 for x86_64-linux-gnu"),
        (archive_name("3.10.13", libc="musl"), "for x86_64-linux-musl"),
        ("python-3.10.13.tar.gz", "is not a python-build-standalone install_only archive"),
    ],
)
def test_a_file_name_for_another_target_is_refused(name: str, says: str) -> None:
    with pytest.raises(InterpreterError, match=says) as err:
        check_name(name, TARGET)
    assert "\n" not in str(err.value)


def test_archive_contents_for_another_machine_or_libc_are_refused(
    cpython_archive: Archive, tmp_path: Path
) -> None:
    """The name says x86_64 glibc; the binary inside is read: its ELF machine and its program
    interpreter (ld-linux for glibc, ld-musl for musl) decide."""
    facts = inspect_archive(cpython_archive.path, cpython_archive.filename)
    assert (facts.python, facts.arch, facts.libc) == ("3.10", "x86_64", "gnu")
    check_fits(facts, cpython_archive.filename, TARGET)
    arm = patched(
        cpython_archive, tmp_path / "a", cpython_archive.filename, b"", b"\xb7", offset=18
    )
    with pytest.raises(InterpreterError, match="its python is built for aarch64, not x86_64"):
        check_fits(inspect_archive(arm, cpython_archive.filename), cpython_archive.filename, TARGET)
    musl = patched(
        cpython_archive,
        tmp_path / "m",
        cpython_archive.filename,
        b"/lib64/ld-linux-x86-64.so.2",
        b"/lib/ld-musl-x86_64.so.1",
    )
    with pytest.raises(InterpreterError, match="linked against musl"):
        check_fits(
            inspect_archive(musl, cpython_archive.filename), cpython_archive.filename, TARGET
        )
    old = Target((3, 10), "manylinux_2_28_x86_64")
    with pytest.raises(InterpreterError, match=r"needs glibc 2\.\d+, newer than the 2.28"):
        check_fits(facts, cpython_archive.filename, old)


def test_an_archive_with_a_link_out_of_python_is_refused(tmp_path: Path) -> None:
    import io
    import tarfile

    bad = tmp_path / archive_name("3.10.13")
    with tarfile.open(bad, "w:gz") as tf:
        link = tarfile.TarInfo("python/lib/escape")
        link.type, link.linkname = tarfile.SYMTYPE, "../../../etc"
        tf.addfile(link)
        data = tarfile.TarInfo("python/bin/python3.10")
        data.size = 4
        tf.addfile(data, io.BytesIO(b"\x7fELF"))
    with pytest.raises(InterpreterError, match=r"links to \.\./\.\./\.\./etc, outside python/"):
        inspect_archive(bad, bad.name)


def test_a_release_without_the_hash_and_a_tampered_archive_are_refused(
    stack: Stack,
    cpython_archive: Archive,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The hash comes from the profile or the release's SHA256SUMS, and the download is checked
    against it; with neither, nothing is trusted."""
    root = publish(tmp_path / "rel", cpython_archive.path)
    sums = root / "20240101" / "SHA256SUMS"
    sums.write_text("0" * 64 + "  another-file.tar.gz\n")
    host = Server(root).start()
    try:
        profile = python_profile(tmp_path, cpython_archive.version)
        args = stack.args("build", tmp_path / "o", tmp_path / "c", "--profile", str(profile))
        args += ["--platform", PLATFORM, "--mirror", f"python-build-standalone={host.url}"]
        result = run(args, capsys)
        assert result.code == 1
        assert "lists no sha256 for " + cpython_archive.filename in result.err
        sums.write_text("0" * 64 + f"  {cpython_archive.filename}\n")
        result = run(args, capsys)
        assert result.code == 1
        assert "sha256 mismatch" in result.err.strip().splitlines()[-1]
    finally:
        host.stop()


def test_the_interpreter_table_is_checked(tmp_path: Path) -> None:
    good = load_profile(
        python_profile(tmp_path / "a", "3.10.13", 'sha256 = { "x" = "' + "a" * 64 + '" }\n')
    )
    assert good.interpreter.bundled is False and good.interpreter.versions == {"3.10": "3.10.13"}
    assert good.interpreter.path_for("3.10.13", "x86_64") == f"20240101/{archive_name('3.10.13')}"
    for extra, says in [
        ("bundled = 1\n", "key 'interpreter.bundled': expected true or false"),
        ('location = "pypi"\n', "'pypi' is not a files location"),
        ('file = "{tag}.tar.gz"\n', "may use only {release}, {version} and {arch}"),
        ("colour = 1\n", "unknown key 'interpreter.colour'"),
    ]:
        with pytest.raises(ProfileError, match=says):
            load_profile(python_profile(tmp_path / "b", "3.10.13", extra))
