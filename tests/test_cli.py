"""The command line as a user meets it: help that teaches, JSON shapes that scripts can rely on,
errors as one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import NAME, ROOT, Stack, clean_environ
from support.cli import run

from verl_bundle.resolve.lock import read_lock

PY38 = Path.home() / ".pyenv" / "versions" / "3.8.18" / "bin" / "python3.8"


def test_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(["--help"], capsys)
    assert result.code == 0
    for command in ("build", "lock", "verify", "rehearse", "doctor", "explain", "profiles"):
        assert command in result.out
    build = run(["build", "--help"], capsys)
    for option in (
        "--cuda",
        "--profile",
        "--python",
        "--mirror",
        "--lock",
        "--output",
        "--cache-dir",
        "--jobs",
        "--compress",
    ):
        assert option in build.out


def test_build_help_sends_the_server_to_a_check_outside_the_bundle(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--sign's help names the gate and the installed verifier as the server's check, and says
    that install.sh --allowed-signers (the bundle's own code) catches accidents only (issue 34)."""
    build = run(["build", "--help"], capsys)
    assert build.code == 0
    text = " ".join(re.sub(r"-\n\s+", "-", build.out).split())  # undo the help's wrapping
    sign = text[text.index("--sign KEY|gpg:KEYID") : text.index("--release N")]
    for words in ("ssh-keygen -Y verify", "sha256sum -c", "verl-bundle-verify", "never forgery"):
        assert words in sign


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(["--version"], capsys)
    assert result.code == 0 and result.out.startswith("verl-bundle ")


def test_unknown_option_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    result = run(["build", "--cuda", "11.8", "--frobnicate"], capsys)
    assert result.code == 2
    assert "Traceback" not in result.err


def test_profiles_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    listing = run(["profiles"], capsys)
    assert listing.code == 0 and "cu118" in listing.out
    doc = json.loads(run(["profiles", "--json"], capsys).out)
    assert (doc["schema"], doc["command"], doc["ok"]) == (1, "profiles", True)
    cu118 = next(p for p in doc["result"] if p["name"] == "cu118")
    assert sorted(cu118) == [
        "cuda",
        "description",
        "name",
        "path",
        "platform",
        "python",
        "readiness",
        "sources",
    ]
    assert cu118["readiness"] == {"purpose": "PPO with FSDP and vLLM rollout", "limit": ""}
    assert cu118["sources"]["needs_extra_index"] is True
    assert cu118["sources"]["needs_release_assets"] is True
    shown = run(["profiles", "show", "cu118"], capsys)
    assert "needs the PyTorch index" in shown.out
    assert (
        "pytorch-cu118        https://download.pytorch.org/whl/cu118  "
        "(torch, torchaudio, torchvision, triton, xformers)" in shown.out
    )
    assert 'name = "cu118"' in shown.out


def test_lock_json_shape(stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "l.toml"
    result = run(
        ["lock", "--profile", "cu118-legacy", *stack.mirrors(), "-o", str(out), "--json"], capsys
    )
    assert result.code == 0, result.err
    doc = json.loads(result.out)["result"]
    assert sorted(doc) == ["lock", "notes", "packages", "profile", "target"]
    assert doc["target"] == {
        "python": "3.10",
        "python_tag": "cp310",
        "platform": "manylinux_2_17_x86_64",
        "cuda": "11.8",
    }
    pkg = next(p for p in doc["packages"] if p["name"] == "torch")
    assert sorted(pkg) == [
        "file",
        "kind",
        "location",
        "name",
        "phase",
        "role",
        "sha256",
        "size",
        "url",
        "version",
    ]
    assert pkg["version"] == "2.1.2+cu118" and pkg["location"] == "pytorch-cu118"


def test_lock_check_reports_differences(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "l.toml"
    base = stack.args("lock", out, tmp_path / "c")
    assert run(base, capsys).code == 0
    current = run([*base, "--check"], capsys)
    assert current.code == 0, current.out + current.err
    assert "current" in current.out
    # Pretend the lock was made when einops was older: --check shows the upgrade.
    text = out.read_text().replace(
        'name = "einops"\nversion = "1.1.0"', 'name = "einops"\nversion = "1.0.9"'
    )
    out.write_text(text)
    assert read_lock(out).package("einops").version == "1.0.9"  # type: ignore[union-attr]
    stale = run([*base, "--check", "--json"], capsys)
    assert stale.code == 1
    envelope = json.loads(stale.out)
    assert envelope["ok"] is False and envelope["command"] == "lock"
    doc = envelope["result"]
    assert doc["current"] is False
    assert doc["differences"] == ["~ einops 1.0.9 -> 1.1.0"]


def test_doctor_here_against_the_cu118_bundle(
    built_bundle: tuple[Path, Path, dict[str, object]], capsys: pytest.CaptureFixture[str]
) -> None:
    """This machine has a CUDA 13.0 nvcc, gcc 12, no driver and no GPU: the doctor says exactly
    that against the cu118 bundle (which has no source build, so nothing of it is fatal)."""
    if shutil.which("nvcc") is None or shutil.which("gcc") is None:
        pytest.skip("this check describes a host with nvcc and gcc")
    result = run(
        ["doctor", "--bundle", str(built_bundle[1]), "--json", "--python", sys.executable], capsys
    )
    envelope = json.loads(result.out)
    assert envelope["command"] == "doctor" and envelope["ok"] is False
    doc = envelope["result"]
    assert sorted(doc) == ["checks", "host", "ok"]
    checks = {c["id"]: c for c in doc["checks"]}
    for c in doc["checks"]:
        assert sorted(c) == ["detail", "fix", "id", "status", "subject", "summary"]
        assert c["status"] in ("ok", "warn", "fail")
    nvcc = subprocess.run(["nvcc", "--version"], capture_output=True, text=True).stdout
    if "release 13.0" in nvcc:
        assert checks["nvcc"]["status"] == "warn"
        assert "13.0" in checks["nvcc"]["summary"] and "11.8" in checks["nvcc"]["summary"]
        assert checks["nvcc"]["fix"]
    assert checks["driver"]["status"] == "warn" and checks["driver"]["fix"]
    assert checks["gpus"]["status"] == "warn"
    gcc_major = int(
        subprocess.run(["gcc", "-dumpversion"], capture_output=True, text=True).stdout.split(".")[0]
    )
    if gcc_major > 11:
        assert checks["gcc"]["status"] == "warn" and "11" in checks["gcc"]["fix"]
    # --python is this 3.11 interpreter, the bundle is for 3.10: that one is a failure.
    assert checks["python"]["status"] == "fail"
    assert result.code == 4 and doc["ok"] is False  # this server cannot install it yet
    assert envelope["verdict"]["line"].startswith("not ready to install: python:")


def test_explain_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "phase.log"
    log.write_text(
        "building 'flash_attn_2_cuda' extension\n/usr/include/python3.10/x.c:1:10: fatal error: Python.h: No such file or directory\n"
    )
    result = run(["explain", str(log)], capsys)
    assert result.code == 0 and "python3.10-dev" in result.out
    # A log's control sequences (a title change, cursor movement) are shown, not obeyed.
    hostile = tmp_path / "hostile.log"
    hostile.write_text("\x1b]0;owned\x07\x1b[2Jfatal error: Python.h: No such file or directory\n")
    shown = run(["explain", str(hostile)], capsys)
    assert shown.code == 0 and "\x1b" not in shown.out
    assert "\\x1b]0;owned\\x07" in shown.out
    unknown = tmp_path / "other.log"
    unknown.write_text("all fine\n")
    assert run(["explain", str(unknown)], capsys).code == 1
    assert run(["explain", str(tmp_path / "missing.log")], capsys).code == 2


@pytest.mark.skipif(
    not PY38.exists(), reason="Python 3.8 (the oldest server python) is not installed"
)
def test_server_tools_run_on_python38(built_bundle: tuple[Path, Path, dict[str, object]]) -> None:
    """A bundle's lib/ runs on the server's python3, which may be 3.8."""
    root = built_bundle[1]
    env = {"PYTHONPATH": str(root / "lib"), "PATH": "/usr/bin:/bin"}
    verify = subprocess.run(
        [str(PY38), "-m", "verl_bundle.airgap", "verify", str(root)],
        capture_output=True,
        text=True,
        env=env,
    )
    assert verify.returncode == 0, verify.stderr
    jobs = subprocess.run(
        [str(PY38), "-m", "verl_bundle.airgap", "max-jobs", "--gib-per-job", "9", "--limit", "0"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert jobs.returncode == 0 and int(jobs.stdout) >= 1
    doctor = subprocess.run(
        [str(PY38), "-m", "verl_bundle.airgap", "doctor", "--bundle", str(root), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert doctor.returncode in (0, 4) and json.loads(doctor.stdout)["result"]["checks"]
    post = subprocess.run(
        [str(PY38), "-m", "verl_bundle.airgap", "postinstall", "--bundle", str(root), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    # Nothing of the bundle is installed in this python: not installed as bundled, no traceback.
    assert post.returncode == 1, post.stdout + post.stderr
    doc = json.loads(post.stdout)
    assert "Traceback" not in post.stderr and doc["ok"] is False
    assert doc["verdict"]["line"].startswith("not installed as bundled: versions: not as bundled")


def test_our_wheel_carries_profiles_and_templates(tmp_path: Path) -> None:
    """`pip install .` (not only editable) must ship the data the tool reads at run time."""
    import zipfile

    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "build",
            "--wheel",
            "--no-isolation",
            "--outdir",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    # The distribution is verl-offline-bundle: the default index's `verl-bundle` is another
    # project's. The command and the import package keep the name verl-bundle / verl_bundle.
    wheel = next(tmp_path.glob("verl_offline_bundle-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    dist_info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
    metadata = zipfile.ZipFile(wheel).read(f"{dist_info}/METADATA").decode()
    assert "\nName: verl-offline-bundle\n" in metadata
    scripts = zipfile.ZipFile(wheel).read(f"{dist_info}/entry_points.txt").decode()
    assert "verl-bundle = verl_bundle.__main__:main" in scripts
    for profile in (ROOT / "profiles").glob("*.toml"):
        assert f"verl_bundle/profiles/{profile.name}" in names
    assert "verl_bundle/templates/install.sh.j2" in names
    assert "verl_bundle/airgap/doctor/__init__.py" in names
    # ... and, installed (not editable), the tool finds them inside the package.
    target = tmp_path / "site"
    inst = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "--target",
            str(target),
            str(wheel),
        ],
        capture_output=True,
        text=True,
    )
    assert inst.returncode == 0, inst.stderr
    code = "import verl_bundle, verl_bundle.resources as r; print(verl_bundle.__file__); print(r.data_dir('profiles'))"
    shown = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target)},
    )
    assert shown.returncode == 0, shown.stderr
    module, profiles = shown.stdout.split()
    assert module.startswith(str(target)) and profiles == str(target / "verl_bundle" / "profiles")


# -- one render path, one error path ----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["build", "--cuda", "11.8", "--compress", "xz"], ["--compress", "'xz'", "zstd"]),
        (["build", "--cuda", "11.8", "--frobnicate"], ["--frobnicate"]),
        (["build", "--jobs", "0"], ["--jobs"]),
        (["profiles", "nope"], ["'nope'"]),
        (["verify"], ["'path'"]),
    ],
)
def test_usage_errors_are_one_line(
    capsys: pytest.CaptureFixture[str], args: list[str], names: list[str]
) -> None:
    result = run(args, capsys)
    assert result.code == 2 and result.out == ""
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    command = f"verl-bundle {args[0]}"
    assert lines[0].startswith(f"error: {command}: ")
    assert lines[0].endswith(f"see `{command} --help`")
    for name in names:
        assert name in lines[0]


@pytest.mark.parametrize(
    "mirror", ["pypi=http://user:s3cret@[::1", "pypi=http://user:s3cret@host:99999/simple"]
)
def test_an_invalid_mirror_url_is_one_line_without_the_secret(
    capsys: pytest.CaptureFixture[str], mirror: str
) -> None:
    result = run(["lock", "--cuda", "11.8", "--mirror", mirror], capsys)
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --mirror pypi=...: not a valid URL")
    assert "s3cret" not in result.err and "Traceback" not in result.err


def test_every_json_output_is_the_versioned_envelope(
    built_bundle: tuple[Path, Path, dict[str, object]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The contract scripts rely on: {schema, command, ok, result}, and each result's keys."""
    log = tmp_path / "x.log"
    log.write_text("fatal error: Python.h: No such file or directory\n")
    expected = {
        ("verify", str(built_bundle[0])): (
            "verify",
            True,
            ["checked", "extra", "ok", "problems", "subject"],
        ),
        ("explain", str(log)): ("explain", True, ["findings", "known", "tail"]),
        ("profiles",): ("profiles", True, None),
        ("toolchain",): ("toolchain", True, ["profiles"]),
        ("profiles", "show", "cu121"): (
            "profiles show",
            True,
            [
                "cuda",
                "description",
                "figures",
                "name",
                "path",
                "platform",
                "python",
                "readiness",
                "sources",
            ],
        ),
    }
    # The commands that end with a verdict carry it beside the result, as the README says.
    with_verdict = {"verify", "explain"}
    for args, (command, ok, keys) in expected.items():
        result = run([*args, "--json"], capsys)
        doc = json.loads(result.out)
        envelope_keys = ["command", "ok", "result", "schema"]
        if command in with_verdict:
            envelope_keys = sorted([*envelope_keys, "verdict"])
            assert doc["verdict"]["ok"] is ok and doc["verdict"]["code"] == result.code, args
        assert sorted(doc) == envelope_keys, args
        assert (doc["schema"], doc["command"], doc["ok"]) == (1, command, ok), args
        assert result.code == (0 if ok else 1)
        if keys is not None:
            assert sorted(doc["result"]) == keys, args
    # build's result (from the subprocess in the fixture): the keys the benchmarks read.
    assert sorted(built_bundle[2]) == [
        "bundle",
        "cached_files",
        "compiled",
        "delta",
        "downloaded",
        "files",
        "gate",
        "host_built",
        "interpreter",
        "lock",
        "notes",
        "packages",
        "profile",
        "sha256",
        "sidecar",
        "signature",
        "size",
        "target",
        "volumes",
        "written_as_fetched",
    ]


def test_a_note_is_said_once(capsys: pytest.CaptureFixture[str]) -> None:
    """A stage that reaches the same conclusion twice (the resolver applies direct artifacts
    before and after its cut-off pass) says it once."""
    from verl_bundle.progress import reporter

    with reporter() as rep:
        for _ in range(3):
            rep.note("note: flash-attn: the release asset is not available; using its sdist")
        rep.note("note: another")
    assert capsys.readouterr().err.splitlines() == [
        "note: flash-attn: the release asset is not available; using its sdist",
        "note: another",
    ]


def test_ctrl_c_is_one_line_and_exit_130(tmp_path: Path) -> None:
    """typer turns KeyboardInterrupt into a silent exit: the boundary says what happened."""
    syscall = Path("/proc/self/syscall")
    if not syscall.exists() or not os.access(syscall, os.R_OK):
        pytest.skip("needs /proc/PID/syscall to see the command waiting")
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_bundle", "explain", "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait until the command blocks reading its standard input (read(0, ...): syscall 0 on
        # x86_64, 63 on aarch64), so the interrupt lands inside the command.
        reading = ("0 0x0 ", "63 0x0 ")
        for _ in range(3000):
            state = Path(f"/proc/{proc.pid}/syscall").read_text()
            if state.startswith(reading):
                break
            threading.Event().wait(0.01)
        else:
            pytest.fail("the command never waited on its input")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err.strip().splitlines() == [
        "error: interrupted; run the same command again to resume: finished downloads are cached"
    ]
    assert out == ""


# -- start-up: --version and --help before typer, each command imports what it uses ----------


def _fresh(code: str, *args: str, columns: int = 100) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)}
    return subprocess.run(
        [sys.executable, *args, "-c", code], capture_output=True, text=True, env=env, timeout=120
    )


def test_fast_help_is_typers_help(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from verl_bundle.cli.helptext import TOP

    typers = run(["--help"], capsys)
    assert typers.code == 0
    assert typers.out == TOP, "run `python -m verl_bundle.cli.helptext` to regenerate helptext.py"
    fast = _fresh(
        "import sys; sys.argv[1:] = ['--help']; from verl_bundle.__main__ import main; main()"
    )
    assert fast.returncode == 0 and fast.stdout == typers.out
    # On a narrow terminal typer wraps the help itself: the stored text is not used.
    monkeypatch.setenv("COLUMNS", "60")
    narrow = run(["--help"], capsys)
    assert max(len(line) for line in narrow.out.splitlines()) <= 60 and narrow.out != TOP
    fast = _fresh(
        "import sys; sys.argv[1:] = ['-h']; from verl_bundle.__main__ import main; main()",
        columns=60,
    )
    assert fast.returncode == 0 and fast.stdout == narrow.out
    monkeypatch.setenv("COLUMNS", "100")
    # Without arguments: the same help, and the usage exit code.
    bare = run([], capsys)
    assert bare.code == 2 and bare.out == typers.out


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["-h"]])
def test_version_and_help_load_no_framework(args: list[str]) -> None:
    code = (
        f"import sys; sys.argv[1:] = {args!r}\n"
        "from verl_bundle.__main__ import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)"
    )
    proc = _fresh(code)
    loaded = set(proc.stderr.split())
    assert proc.stdout.startswith(("verl-bundle ", "Usage: verl-bundle"))
    assert not {"typer", "click", "rich", "requests", "jinja2", "packaging"} & loaded


@pytest.mark.parametrize(
    ("args", "unused"),
    [
        (
            ["profiles"],
            {"requests", "jinja2", "rich", "verl_bundle.resolve.resolver", "verl_bundle.bundle"},
        ),
        (
            ["explain", "{log}"],
            {"requests", "jinja2", "rich", "packaging", "verl_bundle.profile.model"},
        ),
        (["verify", "{missing}"], {"requests", "jinja2", "rich", "verl_bundle.pipeline"}),
    ],
)
def test_a_command_imports_only_what_it_uses(
    tmp_path: Path, args: list[str], unused: set[str]
) -> None:
    log = tmp_path / "x.log"
    log.write_text("all fine\n")
    argv = [a.format(log=log, missing=tmp_path / "nope") for a in args]
    code = (
        "import sys\n"
        "from verl_bundle.cli.main import run\n"
        "from verl_bundle.cli.options import Session\n"
        f"code = run({argv!r}, Session())\n"
        "print(' '.join(sorted(sys.modules)), file=sys.stderr)"
    )
    proc = _fresh(code)
    loaded = set(proc.stderr.split())
    assert "verl_bundle.cli.main" in loaded, proc.stderr[-2000:]
    assert not unused & loaded
    assert "pydantic" not in loaded  # typer 0.29 validates options through it (~0.25 s)


# -- --python: a path or a version, wherever an interpreter is meant ---------------------------


@pytest.mark.skipif(not PY38.exists(), reason="needs a Python 3.8 under ~/.pyenv")
def test_doctor_takes_a_python_version_or_a_path(capsys: pytest.CaptureFixture[str]) -> None:
    by_version = run(["doctor", "--cuda", "11.8", "--python", "3.8", "--json"], capsys)
    host = json.loads(by_version.out)["result"]["host"]
    assert host["python"].startswith("3.8") and host["python_executable"]
    by_path = run(["doctor", "--cuda", "11.8", "--python", str(PY38), "--json"], capsys)
    assert json.loads(by_path.out)["result"]["host"]["python"].startswith("3.8")
    missing = run(["doctor", "--cuda", "11.8", "--python", "3.99"], capsys)
    assert missing.code == 2
    assert missing.err.strip() == (
        "error: --python 3.99: no python3.99 on PATH or in ~/.pyenv/versions; install it, "
        "or give the interpreter's path"
    )


@pytest.mark.slow
def test_make_bundle_passes_each_mirror_and_shows_no_secret(stack: Stack, tmp_path: Path) -> None:
    """`make bundle MIRRORS="NAME=URL ..."` builds through those mirrors, and says where the CLI
    is (it is not on PATH after `make bundle`)."""
    if subprocess.run(["make", "-q", "-C", str(ROOT), ".venv/.installed"]).returncode != 0:
        pytest.skip("the repository's .venv is not installed and current")
    urls = stack.mirrors()[1::2]
    urls[0] = urls[0].replace("http://", "http://builder:s3cret@")
    out = tmp_path / "out"
    proc = subprocess.run(
        # The toy stack is the design card's torch 2.1.2 stack: PROFILE picks it by name.
        [
            *("make", "-s", "-C", str(ROOT), "bundle", "PROFILE=cu118-legacy"),
            *(f"MIRRORS={' '.join(urls)}", f"OUT={out}"),
        ],
        capture_output=True,
        text=True,
        env=clean_environ(tmp_path),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert (out / f"{NAME}.tar").is_file()
    assert "s3cret" not in proc.stdout + proc.stderr
    assert f"[{len(urls)} --mirror]" in proc.stdout
    assert "the CLI is .venv/bin/verl-bundle (or: source .venv/bin/activate)" in proc.stdout
    assert stack.pypi.file_requests()  # the build went through the mirror
    # the last line is the path it wrote, whole
    assert proc.stdout.strip().splitlines()[-1] == str((out / f"{NAME}.tar").resolve())


def test_debug_shows_the_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_bundle.errors import UsageError

    assert run(["build", "--cuda", "9.0"], capsys).code == 2  # one line without --debug
    with pytest.raises(UsageError, match=r"no built-in profile is made for CUDA 9\.0"):
        run(["--debug", "build", "--cuda", "9.0"], capsys)


@pytest.mark.parametrize(
    ("args", "command", "code", "says"),
    [
        (["build", "--cuda", "9.0"], "build", 2, "no built-in profile is made for CUDA 9.0"),
        (["profiles", "show", "nope"], "profiles show", 2, "no built-in profile of that name"),
        (["build", "--bogus"], "build", 2, "No such option: --bogus"),
        (["verify", "/nonexistent.tar"], "verify", 2, "/nonexistent.tar: no such file"),
    ],
)
def test_an_error_with_json_is_the_envelope_on_stdout(
    capsys: pytest.CaptureFixture[str], args: list[str], command: str, code: int, says: str
) -> None:
    """A script reading stdout always gets one document: `ok` false, the message and the exit
    code; people still get the one line on stderr."""
    result = run([*args, "--json"], capsys)
    assert result.code == code
    doc = json.loads(result.out)
    assert doc["schema"] == 1 and doc["command"] == command
    assert doc["ok"] is False and doc["result"] is None
    assert says in doc["error"]["message"] and doc["error"]["exit_code"] == code
    assert result.err.strip() == f"error: {doc['error']['message']}"
    assert run(args, capsys).out == ""  # without --json, nothing on stdout
