"""Source builds compiled on the online host: a tiny real CUDA extension (tests/fixtures/tinycuda,
setuptools calling this host's nvcc) becomes a cached wheel, recorded in the manifest, and the
server installs it offline with no nvcc on its PATH."""

from __future__ import annotations

import dataclasses
import json
import os
import pty
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import clean_environ
from support.airgap import extract, python310, run_install
from support.cli import run
from support.pkgindex import Server
from support.shared import Value, once
from support.stack import UPLOADED
from support.tinycuda import PROFILE, Tiny

from verl_bundle.compile.cost import HostEstimate

FIXTURE = Path(__file__).parent / "fixtures" / "tinycuda"
NAME = "verl-bundle-tiny-cu130-cp310-manylinux_2_17_x86_64"


def _result(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["ok"] is True
    result: dict[str, object] = doc["result"]
    return result


def _manifest(tarball: Path, dest: Path) -> tuple[Path, dict[str, object]]:
    root = extract(tarball, dest)
    return root, json.loads((root / "manifest.json").read_text())


@pytest.mark.slow
def test_compiled_here_cached_recorded_and_installed_offline(tiny: Tiny, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first = _result(tiny.build(tmp_path / "out1", cache, "--compile", "always"))
    summary = first["compiled"]
    assert isinstance(summary, list) and len(summary) == 1
    assert summary[0].startswith("tinycuda compiled here (cu130, sm90, ")
    assert "reused" not in summary[0]
    root, manifest = _manifest(Path(str(first["bundle"])), tmp_path / "x1")
    files = {f["name"]: f for f in manifest["files"]}  # type: ignore[attr-defined]
    entry = files["tinycuda"]
    assert entry["path"] == "wheels/tinycuda-0.1-cp310-cp310-linux_x86_64.whl"
    assert entry["kind"] == "wheel"
    assert entry["built_from"]["file"] == "tinycuda-0.1.tar.gz"
    compiled = entry["compiled"]
    assert (
        compiled["toolkit"].startswith("nvcc 13.0.")
        and f"({tiny.cuda_home.resolve()})" in compiled["toolkit"]
    )
    assert compiled["compiler"].startswith("gcc ") and compiled["archs"] == "9.0"
    assert compiled["seconds"] > 0 and len(compiled["key"]) == 32
    # The server builds nothing: no sdist shipped, no source build left for the doctor.
    assert not (root / "sources").exists()
    assert all(not p["source_builds"] for p in manifest["phases"])  # type: ignore[attr-defined]
    keys = [p.name for p in (cache / "compiled").iterdir() if not p.name.startswith(".")]
    assert keys == [compiled["key"], "logs"] or sorted(keys) == sorted([compiled["key"], "logs"])
    log = cache / "compiled" / "logs" / f"tinycuda-{compiled['key']}.log"
    assert "nvcc" in log.read_text() and "-gencode arch=compute_90,code=sm_90" in log.read_text()

    assert compiled["reused_from_cache"] is False and compiled["made"].endswith("Z")

    # A rebuild reuses the wheel: same key, same bytes, and no compile ran (its log untouched).
    # Said truthfully: reused, and when it was compiled, in the line and in the manifest.
    log.write_text("sentinel\n")
    second = _result(tiny.build(tmp_path / "out2", cache, "--compile", "always"))
    figures = summary[0].split(" compiled here ", 1)[1]
    assert second["compiled"] == [
        f"tinycuda reused from the cache: compiled on {compiled['made']} {figures}, not in "
        "this build"
    ]
    assert log.read_text() == "sentinel\n"
    _, manifest2 = _manifest(Path(str(second["bundle"])), tmp_path / "x2")
    entry2 = {f["name"]: f for f in manifest2["files"]}["tinycuda"]  # type: ignore[attr-defined]
    assert entry2["sha256"] == entry["sha256"] and entry2["compiled"]["key"] == compiled["key"]
    assert entry2["compiled"]["reused_from_cache"] is True
    assert entry2["compiled"]["made"] == compiled["made"]

    # An entry another user could write (a team-shared --cache-dir): its record proves nothing,
    # so it is not reused, and the build says why.
    entry_dir = cache / "compiled" / compiled["key"]
    entry_dir.chmod(0o775)
    proc = tiny.build(tmp_path / "out2b", cache, "--compile", "always")
    shared = _result(proc)
    lines = shared["compiled"]
    assert isinstance(lines, list) and len(lines) == 1
    line = str(lines[0])
    assert line.startswith("tinycuda compiled here (cu130, sm90, "), line
    assert line.endswith(
        f"; the cache's wheel of this key was not reused: {entry_dir} is writable by other users"
    )
    assert log.read_text() != "sentinel\n"  # compiled again
    log.write_text("sentinel\n")

    # A valid wheel planted in the cache entry (another build's, a user's): not the one compiled
    # here, so not reused: the entry goes and the wheel is compiled again.
    cached = cache / "compiled" / compiled["key"] / Path(entry["path"]).name
    planted = cached.read_bytes() + b"\0"  # still a zip: trailing bytes after its directory
    cached.write_bytes(planted)
    third = _result(tiny.build(tmp_path / "out3", cache, "--compile", "always"))
    assert "reused from the cache" not in str(third["compiled"])
    assert log.read_text() != "sentinel\n"  # compiled again
    assert cached.read_bytes() != planted

    # The server: no network, no nvcc anywhere on its PATH.
    home = tmp_path / "home"
    home.mkdir()
    prefix = tmp_path / "prefix"
    path = "/usr/bin:/bin"
    assert shutil.which("nvcc", path=path) is None
    proc = run_install(
        root, home, "--prefix", str(prefix), "--python", python310(), "--yes", env={"PATH": path}
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    check = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-c",
            "import tinycuda as t; print(t.answer(), t.nvcc_major())",
        ],
        capture_output=True,
        text=True,
        env={"PATH": path},
    )
    assert check.stdout.split() == ["42", "13"], check.stderr


def test_wrong_major_toolkit_is_refused_in_one_line(
    tiny: Tiny, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = tmp_path / "cuda-11.8"
    (fake / "bin").mkdir(parents=True)
    (fake / "include").mkdir()
    (fake / "include" / "cuda_runtime.h").write_text("/* CUDA 11.8 */\n")
    nvcc = fake / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 11.8, V11.8.89'\n")
    nvcc.chmod(0o755)
    args = ["build", "--profile", str(tiny.profile(tmp_path)), "--python", "3.10"]
    args += ["--mirror", f"pypi={tiny.server.index_url}", "-o", str(tmp_path / "out")]
    args += ["--cache-dir", str(tmp_path / "cache"), "--compile", "always"]
    result = run([*args, "--cuda-home", str(fake)], capsys)
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert lines[-1].startswith("error: --cuda-home ")
    assert "nvcc 11.8" in lines[-1] and "needs CUDA 13.x" in lines[-1]
    assert "Traceback" not in result.err
    assert not (tmp_path / "out").exists() or not list((tmp_path / "out").glob("*.tar"))
    # auto: the same toolkit leaves the build to the server, saying why and what it needs.
    result = run([*args[:-1], "auto", "--cuda-home", str(fake)], capsys)
    assert result.code == 0, result.err
    assert "tinycuda left to build on the server: --cuda-home " in result.out
    assert "The server will need nvcc 13.0, gcc >=6,<16, Python 3.10 headers" in result.out


@pytest.mark.slow
def test_compiler_error_names_the_log_and_explains_it(tiny: Tiny, tmp_path: Path) -> None:
    proc = tiny.build(tmp_path / "out", tmp_path / "cache", version="0.2")
    assert proc.returncode == 1, proc.stderr
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("error: tinycuda: compiling tinycuda-0.2.tar.gz on this host failed")
    log = Path(line.split("log: ", 1)[1].split(";", 1)[0])
    assert log.is_file() and "undeclared_name" in log.read_text()
    assert "explain" in line
    assert "Traceback" not in proc.stderr
    compiled = tmp_path / "cache" / "compiled"
    assert [p.name for p in compiled.iterdir()] == ["logs"]  # nothing under a final name


def test_max_jobs_from_the_environment_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from verl_bundle.compile.buildenv import compile_jobs
    from verl_bundle.compile.job import CompileJob

    job = CompileJob("x", tmp_path, "x.tar.gz", "0" * 64, "cp310", "13.0", None, ())
    monkeypatch.setenv("MAX_JOBS", "3")
    assert compile_jobs(job) == 3
    monkeypatch.setenv("MAX_JOBS", "nonsense")
    assert 1 <= compile_jobs(job) <= (os.cpu_count() or 1)


def test_one_architecture_sizes_jobs_at_its_measured_share(tmp_path: Path) -> None:
    """A 24 GB, 2-core host (the flash-attn compile-real machine, 17 GiB free): 9 GiB per job
    gives 2 jobs for one architecture (one nvcc pipeline each), 1 job for two."""
    from verl_bundle.compile.buildenv import jobs_for
    from verl_bundle.compile.job import CompileJob

    job = CompileJob("x", tmp_path, "x.tar.gz", "0" * 64, "cp310", "13.0", None, ())
    free = 17 << 30
    assert jobs_for(job, "9.0", free, 2) == 2
    assert jobs_for(job, "8.0;9.0", free, 2) == 1
    assert jobs_for(job, "9.0", free, 1) == 1  # never more than the cores
    assert jobs_for(job, "9.0", 4 << 30, 16) == 1  # at least one


def test_max_jobs_counts_the_page_cache_as_available(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's host: MemFree 4.9 GiB, MemAvailable 20.7 GiB (the page cache is reclaimable):
    a one-architecture compile at 9 GiB per job runs 2 jobs on 2 cores, not 1."""
    from verl_bundle.airgap.doctor import resources
    from verl_bundle.compile.buildenv import compile_jobs
    from verl_bundle.compile.job import CompileJob

    meminfo = tmp_path / "meminfo"
    meminfo.write_text(
        "MemTotal:       24576000 kB\nMemFree:         5138022 kB\n"
        "MemAvailable:   21705523 kB\nCached:         15000000 kB\n"
    )
    monkeypatch.setattr(resources, "MEMINFO", str(meminfo))
    monkeypatch.setattr(resources, "_cgroup_room", lambda: None)  # this host's limit aside
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    monkeypatch.delenv("MAX_JOBS", raising=False)
    job = CompileJob("x", tmp_path, "x.tar.gz", "0" * 64, "cp310", "13.0", None, ())
    assert compile_jobs(job, "9.0") == 2
    assert compile_jobs(job, "8.0;9.0") == 2  # 20.7 GiB holds two 9 GiB jobs


def _estimate(minutes_archs: str, jobs: int, mode: str = "auto") -> HostEstimate:
    from verl_bundle.compile.cost import host_estimate

    return host_estimate("flash-attn", minutes_archs, jobs, mode)


def test_a_long_host_compile_is_refused_without_a_terminal() -> None:
    """About 3 h of flash-attn (two architectures, 180 core-minutes each): no terminal, no
    --yes: one line that says what and what to do, exit 2, before anything is spent."""
    from verl_bundle.compile.build import CompileRefusedError, consent

    estimate = _estimate("8.0;9.0", 1)
    assert estimate.minutes is not None and estimate.minutes > 30
    with pytest.raises(CompileRefusedError) as refused:
        consent(estimate, yes=False, ask=None)
    line = str(refused.value)
    assert refused.value.code == 2
    assert line.startswith("flash-attn: not compiled: no terminal to confirm it on for a compile")
    assert "--yes or --compile always compiles it here" in line
    assert "--compile never leaves it to the server" in line and "--cuda-archs 9.0" in line
    consent(estimate, yes=True, ask=None)  # --yes
    consent(_estimate("8.0;9.0", 1, "always"), yes=False, ask=None)  # --compile always


def test_a_long_host_compile_asks_on_a_terminal_and_a_short_one_does_not() -> None:
    from verl_bundle.compile.build import CompileRefusedError, consent

    asked: list[str] = []

    def answer(reply: bool) -> Callable[[str], bool]:
        def ask(question: str) -> bool:
            asked.append(question)
            return reply

        return ask

    estimate = _estimate("8.0;9.0", 1)
    consent(estimate, yes=False, ask=answer(True))
    assert asked and asked[-1].startswith("flash-attn: compiling here for sm80,sm90: about ")
    assert asked[-1].endswith("Compile here now?")
    with pytest.raises(CompileRefusedError, match="not compiled: not confirmed for a compile"):
        consent(estimate, yes=False, ask=answer(False))
    asked.clear()
    # 30 min or less, or no measured figure (a package of your own): no question
    short = dataclasses.replace(estimate, minutes=30.0)
    consent(short, yes=False, ask=answer(False))
    consent(dataclasses.replace(estimate, minutes=None), yes=False, ask=None)
    assert asked == []


def test_the_terminal_question_reads_the_answer_from_a_real_terminal() -> None:
    """The CLI's question on a pty: y starts the compile, anything else (Enter) does not, and
    without a terminal there is no question at all."""
    script = (
        "import sys\n"
        "from verl_bundle.cli.options import terminal_question\n"
        "ask = terminal_question()\n"
        "print('none' if ask is None else ask('Compile here now?'), flush=True)\n"
    )
    for typed, said in ((b"y\n", "True"), (b"\n", "False")):
        pid, fd = pty.fork()
        if pid == 0:  # the child: stdin, stdout and stderr are the pty
            os.execv(sys.executable, [sys.executable, "-c", script])  # noqa: S606 (the pty child)
        out = b""
        os.write(fd, typed)
        while True:
            try:
                chunk = os.read(fd, 1024)
            except OSError:  # EIO: the child closed the pty
                break
            if not chunk:
                break
            out += chunk
        os.waitpid(pid, 0)
        os.close(fd)
        text = out.decode()
        assert "Compile here now? [y/N]" in text, text
        assert text.rstrip().endswith(f": {said}"), text  # printed after the prompt
    piped = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert piped.stdout.strip() == "none", piped.stderr


@pytest.mark.parametrize(("flag", "abi"), [("1", "cxx11abi=TRUE"), ("0", "cxx11abi=FALSE")])
def test_the_abi_in_the_cache_key_is_what_the_torch_wheel_declares(
    tmp_path: Path, flag: str, abi: str
) -> None:
    import zipfile

    from verl_bundle.compile.wheelcache import torch_abi

    wheel = tmp_path / "torch-2.5.1-cp310-cp310-linux_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(
            "torch/share/cmake/Torch/TorchConfig.cmake",
            f'if(CMAKE_SYSTEM_NAME STREQUAL "Linux")\n'
            f'  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI={flag}")\nendif()\n',
        )
    # The wheel's own declaration wins over the version rule (2.5.1 would say FALSE).
    assert torch_abi(wheel, "2.5.1") == abi
    # No wheel, or one without the file: the rule.
    assert torch_abi(None, "2.8.0") == "cxx11abi=TRUE"
    empty = tmp_path / "empty.whl"
    zipfile.ZipFile(empty, "w").close()
    assert torch_abi(empty, "2.5.1") == "cxx11abi=FALSE"
    assert torch_abi(None, None) == "none"


def test_temp_dirs_of_killed_compiles_are_cleaned(tmp_path: Path) -> None:
    from verl_bundle.compile.workdir import claim

    dead = subprocess.Popen(["true"])
    dead.wait()
    gone = tmp_path / f".tmp-flash-attn-{dead.pid}"
    mine = tmp_path / f".tmp-flash-attn-{os.getpid()}"
    for d in (gone, mine):
        (d / "build").mkdir(parents=True)
        (d / "build" / "obj.o").write_bytes(b"x")
    work = claim(tmp_path, "another-key")  # a build of another key cleans up as it claims
    work.release()
    assert not gone.exists()
    assert mine.exists()  # a compile still running (this process) is left alone
    assert not work.resumed and work.path.name.startswith(".tmp-another-key-")


# The wheel layout of NVIDIA's CUDA 13 nvcc wheels (nvidia-cuda-nvcc 13.2.86's own nvcc.profile).
WHEEL_NVCC_PROFILE = """
TOP              = $(_HERE_)/..

CICC_PATH        = $(TOP)/nvvm/bin
NVVMIR_LIBRARY_DIR = $(TOP)/nvvm/libdevice

LD_LIBRARY_PATH += $(TOP)/lib:
PATH            += $(CICC_PATH):$(_HERE_):

INCLUDES        +=  "-I$(TOP)/include" $(_SPACE_)
SYSTEM_INCLUDES +=  "-isystem" "$(TOP)/include/cccl" $(_SPACE_)

LIBRARIES        =+ $(_SPACE_) "-L$(TOP)/lib/stubs" "-L$(TOP)/lib"
"""


def _toolkit_wheel(directory: Path, name: str, version: str, members: dict[str, Path]) -> Path:
    """A wheel shaped like NVIDIA's CUDA 13 ones: files under nvidia/cu13/, executables marked."""
    import base64
    import hashlib
    import zipfile

    dist = name.replace("-", "_")
    path = directory / f"{dist}-{version}-py3-none-manylinux_2_17_x86_64.whl"
    info = f"{dist}-{version}.dist-info"
    record: list[str] = []
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zf:

        def put(arc: str, data: bytes, mode: int) -> None:
            zi = zipfile.ZipInfo(arc, date_time=(2024, 1, 1, 0, 0, 0))
            zi.external_attr = mode << 16
            zf.writestr(zi, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")

        for arc, src in sorted(members.items()):
            put(f"nvidia/cu13/{arc}", src.read_bytes(), 0o755 if os.access(src, os.X_OK) else 0o644)
        put(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
            0o644,
        )
        put(
            f"{info}/WHEEL",
            b"Wheel-Version: 1.0\nGenerator: verl-bundle-tests\nRoot-Is-Purelib: false\n"
            b"Tag: py3-none-manylinux_2_17_x86_64\n",
            0o644,
        )
        zi = zipfile.ZipInfo(f"{info}/RECORD", date_time=(2024, 1, 1, 0, 0, 0))
        zi.external_attr = 0o644 << 16
        zf.writestr(zi, "\n".join([*record, f"{info}/RECORD,,"]) + "\n")
    return path


def _tree(home: Path, sub: str) -> dict[str, Path]:
    return {
        str(p.relative_to(home)): p
        for p in sorted((home / sub).rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@dataclass
class StackNvcc:
    """The tiny index plus nvcc wheels in NVIDIA's CUDA 13 layout, made from this host's toolkit
    (nvidia-cuda-nvcc: bin/; nvidia-nvvm: nvvm/; nvidia-cuda-runtime: include/ and lib/)."""

    server: Server
    home: Path  # this host's toolkit, hidden from the builds below
    profile: Path

    def run(
        self, argv: list[str], env: dict[str, str], *, offline: bool = False, extra: str = ""
    ) -> subprocess.CompletedProcess[str]:
        """argv in a mount namespace where every /usr/local/cuda* is empty (and no network
        when `offline`), after the shell lines `extra`."""
        env = dict(env)
        env["PATH"] = os.pathsep.join(
            p for p in env["PATH"].split(os.pathsep) if not p.startswith("/usr/local")
        )
        env.pop("CUDA_HOME", None)
        hide = f'{extra}mount -t tmpfs tmpfs {self.home} && exec "$@"'
        flags = ["-m", "-n"] if offline else ["-m"]
        return subprocess.run(
            ["unshare", *flags, "sh", "-c", hide, "sh", *argv],
            capture_output=True,
            text=True,
            timeout=900,
            env=env,
        )

    def build(self, tmp: Path, compile_mode: str) -> Path:
        args = ["build", "--profile", str(self.profile), "--python", "3.10"]
        args += ["--compile", compile_mode, "--mirror", f"pypi={self.server.index_url}"]
        args += ["-o", str(tmp / "out"), "--cache-dir", str(tmp / "cache")]
        args += ["--cuda-archs", "9.0", "--json"]
        proc = self.run([sys.executable, "-m", "verl_bundle", *args], clean_environ(tmp))
        return Path(str(_result(proc)["bundle"]))


@pytest.fixture(scope="module")
def stack_nvcc(tiny: Tiny, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackNvcc]:
    home = tiny.cuda_home.resolve()

    def make(tmp: Path) -> Value:
        index = tmp / "index"
        shutil.copytree(tiny.root, index)
        bins = {f"bin/{n}": home / "bin" / n for n in ("nvcc", "cudafe++", "fatbinary", "nvlink")}
        bins |= {"bin/ptxas": home / "bin" / "ptxas"} | _tree(home, "bin/crt")
        profile_file = tmp / "nvcc.profile"
        profile_file.write_text(WHEEL_NVCC_PROFILE)
        bins["bin/nvcc.profile"] = profile_file
        _toolkit_wheel(index, "nvidia-cuda-nvcc", "13.0.88", bins)
        _toolkit_wheel(index, "nvidia-nvvm", "13.0.88", _tree(home, "nvvm"))
        runtime = _tree(home, "include")
        runtime |= {f"lib/{n}": home / "lib" / n for n in ("libcudart_static.a", "libcudadevrt.a")}
        _toolkit_wheel(index, "nvidia-cuda-runtime", "13.0.96", runtime)
        profile = tmp / "tiny-stack-nvcc.toml"
        profile.write_text(
            PROFILE.format(version="0.1").replace(
                'requirements = ["tinycuda==0.1"]',
                'requirements = ["tinycuda==0.1", "nvidia-cuda-nvcc==13.0.88", '
                '"nvidia-nvvm==13.0.88", "nvidia-cuda-runtime==13.0.96"]',
            )
        )
        return [str(index), str(profile)]

    # The index with the toolkit's wheels (about 230 MB), made once per run (read-only).
    made = once(tmp_path_factory, "compile.stack-nvcc", make)
    assert isinstance(made, list)
    index, profile = (Path(str(p)) for p in made)
    server = Server(index, json_api=True, upload_time=UPLOADED).start()
    try:
        yield StackNvcc(server, home, profile)
    finally:
        server.stop()


@pytest.mark.slow
def test_a_host_with_no_cuda_compiles_with_the_stacks_own_nvcc_wheels(
    stack_nvcc: StackNvcc, tmp_path: Path
) -> None:
    # CUDA 13's nvidia-cuda-nvcc wheel carries nvcc itself: a stack that locks it (with nvvm and
    # the runtime headers) compiles here with no CUDA installed.
    bundle = stack_nvcc.build(tmp_path, "always")
    _, manifest = _manifest(bundle, tmp_path / "x")
    entry = {f["name"]: f for f in manifest["files"]}["tinycuda"]  # type: ignore[attr-defined]
    assert entry["compiled"]["toolkit"] == "nvcc 13.0.88 (the stack's nvidia-cuda-nvcc wheels)"
    trees = list((tmp_path / "cache" / "toolkits").iterdir())
    assert [p.name.startswith(".tmp-") for p in trees] == [False]
    assert os.access(trees[0] / "nvidia" / "cu13" / "nvvm" / "bin" / "cicc", os.X_OK)


def _import_tinycuda(prefix: Path) -> list[str]:
    check = subprocess.run(
        [
            str(prefix / "bin" / "python"),
            "-c",
            "import tinycuda as t; print(t.answer(), t.nvcc_major())",
        ],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    return check.stdout.split() or [check.stderr]


@pytest.mark.slow
def test_a_server_with_no_cuda_builds_with_the_bundles_own_nvcc(
    stack_nvcc: StackNvcc, tmp_path: Path
) -> None:
    # The source build is left to the server, which has no CUDA toolkit and no network: the
    # doctor passes (the bundle brings nvcc) and the installer points CUDA_HOME at the venv's
    # nvidia/cu13 once the earlier phase has installed the nvcc wheels.
    bundle = stack_nvcc.build(tmp_path, "never")
    root = extract(bundle, tmp_path / "x")
    home = tmp_path / "home"
    home.mkdir()
    prefix = tmp_path / "prefix"
    env = clean_environ(home)
    env["HOME"] = str(home)
    argv = [str(root / "install.sh"), "--prefix", str(prefix), "--python", python310(), "--yes"]
    proc = stack_nvcc.run(argv, env, offline=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout + proc.stderr
    assert "nvcc from the bundle's own nvidia-cuda-nvcc 13.0.88 wheel" in out
    site = prefix / "lib" / "python3.10" / "site-packages"
    assert f"CUDA_HOME={site / 'nvidia' / 'cu13'}" in out
    assert _import_tinycuda(prefix) == ["42", "13"]


@pytest.mark.slow
def test_an_nvcc_wrapper_on_path_gets_its_real_toolkit_as_cuda_home(
    tiny: Tiny, tmp_path: Path
) -> None:
    # bin/nvcc is a wrapper (as /usr/local/bin/nvcc is on many servers): torch and setup.py
    # would take the directory above it, which has no headers. The installer sets CUDA_HOME to
    # the toolkit the wrapper runs. The host's toolkit is moved out of its usual place.
    out, cache = tmp_path / "out", tmp_path / "cache"
    bundle = Path(str(_result(tiny.build(out, cache, "--compile", "never"))["bundle"]))
    root = extract(bundle, tmp_path / "x")
    real = tmp_path / "toolkit"
    real.mkdir()
    wrap = tmp_path / "wrap" / "bin"
    wrap.mkdir(parents=True)
    (wrap / "nvcc").write_text(f'#!/bin/sh\nexec {real}/bin/nvcc "$@"\n')
    (wrap / "nvcc").chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    prefix = tmp_path / "prefix"
    env = clean_environ(home)
    env["HOME"] = str(home)
    env["LD_LIBRARY_PATH"] = str(real / "lib64")  # the toolkit's libcudart, moved with it
    hider = StackNvcc(tiny.server, tiny.cuda_home.resolve(), Path())
    argv = [
        "env",
        f"PATH={wrap}:/usr/bin:/bin:{Path(python310()).parent}",
        str(root / "install.sh"),
    ]
    argv += ["--prefix", str(prefix), "--python", python310(), "--yes"]
    proc = hider.run(argv, env, offline=True, extra=f"mount --bind {hider.home} {real} && ")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"CUDA_HOME={real}" in proc.stdout + proc.stderr
    assert _import_tinycuda(prefix) == ["42", "13"]


def test_cuda12_nvcc_wheels_make_no_toolkit_and_unsafe_members_are_refused(tmp_path: Path) -> None:
    import zipfile

    from verl_bundle.compile.stacktoolkit import stack_toolkit
    from verl_bundle.compile.toolkit import ToolkitError

    # The CUDA 12 nvcc wheel holds ptxas and headers only (nvidia/cuda_nvcc/...): no toolkit.
    cu12 = tmp_path / "nvidia_cuda_nvcc_cu12-12.4.131-py3-none-manylinux2014_x86_64.whl"
    with zipfile.ZipFile(cu12, "w") as zf:
        zf.writestr("nvidia/cuda_nvcc/bin/ptxas", b"\x7fELF")
        zf.writestr("nvidia/cuda_nvcc/include/crt/host_config.h", b"")
    assert stack_toolkit({cu12.name: cu12}, 12, tmp_path / "cache") is None
    assert not list((tmp_path / "cache").glob("toolkits/*"))
    # A member that climbs out of the tree is refused, and nothing is left under a final name.
    bad = tmp_path / "nvidia_cuda_nvcc-13.0.88-py3-none-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(bad, "w") as zf:
        zf.writestr("nvidia/cu13/bin/nvcc", b"#!/bin/sh\n")
        zf.writestr("nvidia/cu13/../../../escape", b"x")
    with pytest.raises(ToolkitError, match="unsafe member name"):
        stack_toolkit({bad.name: bad}, 13, tmp_path / "cache")
    assert list((tmp_path / "cache" / "toolkits").iterdir()) == []
    assert not (tmp_path / "escape").exists()


def test_a_running_compile_is_never_taken_over_and_a_stopped_one_of_the_key_is(
    tmp_path: Path,
) -> None:
    """claim(): a directory whose owner still holds its lock is left alone (another build of
    the same key makes its own); a stopped one of the key is resumed; stopped ones of other
    keys are removed; one never prepared (venv unfinished) is not resumed."""
    from verl_bundle.compile.workdir import OWNER, PREPARED, claim

    root = tmp_path / "compiled"
    running = root / ".tmp-k1-1"
    stopped = root / ".tmp-k1-2"
    other = root / ".tmp-k2-3"
    unprepared = root / ".tmp-k3-4"
    for d in (running, stopped, other, unprepared):
        d.mkdir(parents=True)
        (d / OWNER).write_text("")  # as a compile leaves it; its lock went with its process
    for d in (running, stopped, other):
        (d / PREPARED).write_text("x")
    # A real other process holds `running`'s lock for as long as it lives.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); "
            "fcntl.flock(fd, fcntl.LOCK_EX); print('held', flush=True); time.sleep(300)",
            str(running / OWNER),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        first = claim(root, "k1")
        assert first.path == stopped and first.resumed
        assert running.exists() and not other.exists()
        second = claim(root, "k1")  # `stopped` is now held by `first`: a new directory
        assert not second.resumed and second.path == root / f".tmp-k1-{os.getpid()}"
        assert running.exists() and stopped.exists()
        third = claim(root, "k3")
        assert not third.resumed and not unprepared.exists()
        for held in (first, second, third):
            held.release()
    finally:
        holder.kill()
        holder.communicate()
    # The holder is gone: its directory is stopped now, and resumable.
    again = claim(root, "k1")
    assert again.resumed and again.path in (running, stopped)
    again.release()
