"""A host compile says what it will cost before it starts, shows its progress with no terminal,
and stops whole: Ctrl-C or SIGTERM ends every process it started (ninja runs each nvcc in a
process group of its own), keeps the resumable work directory and exits 130/143; the next build
resumes it. The compile is the tests' tiny CUDA extension (tests/fixtures/tinycuda), built with
this host's nvcc 13 through ninja."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from conftest import clean_environ
from support.tinycuda import Tiny

from verl_bundle.airgap.contract.manifest import BuildTime
from verl_bundle.compile.cost import host_estimate, server_build_time, server_default_archs
from verl_bundle.compile.stop import MARK, new_mark, stop_tree, tree
from verl_bundle.compile.watch import CompileWatch
from verl_bundle.profile.model import SourceBuild


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, session, start time) of a live process (not a zombie), else None."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rindex(b")") + 2 :].split()
    if fields[0] == b"Z":
        return None
    return int(fields[1]), int(fields[3]), int(fields[19])


def _family(root: int, mark: str) -> dict[int, int]:
    """Every live descendant of `root`, every process of their sessions (but `root`'s own) and
    every process whose environment holds `mark` (a variable this test set): pid -> start time
    (so that a pid reused later is not mistaken for one of them)."""
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (st := _stat(int(entry.name))) is not None:
            table[int(entry.name)] = st
    found = {root}
    for pid in table:
        with contextlib.suppress(OSError):
            if mark.encode() in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.add(pid)
    own = table[root][1] if root in table else None
    grew = True
    while grew:
        sessions = {table[p][1] for p in found if p in table} - {own}
        more = {p for p, st in table.items() if st[0] in found or st[1] in sessions}
        grew = not more <= found
        found |= more
    found.discard(os.getpid())
    return {p: table[p][2] for p in found if p in table}


def _alive(family: dict[int, int]) -> list[int]:
    return [p for p, start in family.items() if (st := _stat(p)) is not None and st[2] == start]


class Lines:
    """A stream read line by line on a thread, kept for the test to wait on."""

    def __init__(self, stream: object) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: object) -> None:
        for line in stream:  # type: ignore[attr-defined]
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def join(self) -> str:
        self._thread.join(timeout=60)
        return self.text()


def _slow_toolkit(tiny: Tiny, tmp_path: Path, marker: Path) -> Path:
    """A toolkit whose nvcc is the real one, except for answer.cu: that compile says its pid
    and hangs, so the build is stopped with one object finished and one in flight."""
    slow = tmp_path / "slow-cuda"
    (slow / "bin").mkdir(parents=True)
    os.symlink(tiny.cuda_home / "include", slow / "include")
    (slow / "bin" / "nvcc").write_text(
        "#!/bin/sh\n"
        f'case "$*" in *answer.cu*) echo $$ > {marker}; exec sleep 300;; esac\n'
        f'exec {tiny.cuda_home}/bin/nvcc "$@"\n'
    )
    (slow / "bin" / "nvcc").chmod(0o755)
    return slow


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_stopped_compile_leaves_no_process_and_resumes(
    tiny: Tiny, tmp_path: Path, sig: signal.Signals
) -> None:
    marker = tmp_path / "compiling"
    slow = _slow_toolkit(tiny, tmp_path, marker)
    out, cache = tmp_path / "out", tmp_path / "cache"
    args = ["build", "--profile", str(tiny.profile(tmp_path)), "--python", "3.10"]
    args += ["--mirror", f"pypi={tiny.server.index_url}", "-o", str(out), "--cache-dir", str(cache)]
    args += ["--cuda-archs", "9.0", "--cuda-home", str(slow)]
    mark = f"TEST_COMPILE_STOP={tmp_path}"
    env = clean_environ(tmp_path)
    env["TEST_COMPILE_STOP"] = str(tmp_path)
    proc = subprocess.Popen(
        [sys.executable, "-m", "verl_bundle", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    err = Lines(proc.stderr)
    family: dict[int, int] = {}
    try:
        # No terminal here: the estimate comes first, then a line as ninja finishes an object.
        deadline = time.monotonic() + 300
        while not (marker.exists() and "1 of 3 objects" in err.text()):
            assert proc.poll() is None, err.join()
            assert time.monotonic() < deadline, "the compile never got going: " + err.text()
            time.sleep(0.2)
        assert "tinycuda: compiling here for sm90 on these " in err.text()
        assert "(no measured figure for how long it takes)" in err.text()
        assert "tinycuda: compiling: 1 of 3 objects, " in err.text()
        family = _family(proc.pid, mark)
        hung = int(marker.read_text())
        assert hung in family  # the hanging nvcc, in a process group of its own
        assert os.getpgid(hung) != os.getpgid(proc.pid)
        proc.send_signal(sig)
        proc.wait(timeout=120)
        text = err.join()
        if sig != signal.SIGKILL:  # SIGKILL cannot be answered: only the work directory counts
            assert _alive(family) == [], f"left running after {sig.name}: {_alive(family)}"
            assert proc.returncode == {signal.SIGTERM: 143, signal.SIGINT: 130}[sig], text
            assert "the compile so far is kept in " in text
            kept_line = next(x for x in text.splitlines() if "the compile so far is kept" in x)
            # its size, so that a user knows what removing it frees (4.6 GB for cu130's)
            assert re.search(r"kept in \S+ \(\d+\.\d (MB|GB)\); the next build", kept_line)
            last = text.strip().splitlines()[-1]
            assert last.startswith("error: " + ("terminated" if sig == signal.SIGTERM else "int"))
            assert "run the same command again to resume" in last
            assert "Traceback" not in text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in _alive(family):  # what this test started, if the build left it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        err.join()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
    compiled = cache / "compiled"
    finals = [p for p in compiled.iterdir() if p.name != "logs" and not p.name.startswith(".tmp-")]
    assert finals == []
    assert not out.exists() or not list(out.glob("*.tar"))
    kept = [p for p in compiled.iterdir() if p.name.startswith(".tmp-")]
    assert len(kept) == 1 and (kept[0] / "venv" / "bin" / "python").exists()
    # The next build (the real nvcc now) takes the directory over and finishes the wheel.
    made = next((kept[0] / "src").iterdir()) / "made-before-the-stop.o"
    made.write_bytes(b"an object")
    proc2 = tiny.build(out, cache, "--cuda-home", str(tiny.cuda_home))
    assert proc2.returncode == 0, proc2.stderr
    assert "tinycuda compiled here (cu130, sm90, " in proc2.stdout
    assert ", resumed a stopped compile)" in proc2.stdout
    assert not made.exists()  # the directory was used, then removed once the wheel was in place
    assert [p.name for p in compiled.iterdir() if p.name.startswith(".tmp-")] == []
    (final,) = [p for p in compiled.iterdir() if p.name != "logs"]
    assert len(list(final.glob("tinycuda-0.1-*.whl"))) == 1
    assert "=== resumed in" in next((compiled / "logs").iterdir()).read_text()


# A process tree shaped like a compile's: a child in a group of its own (as ninja starts nvcc),
# and a grandchild in a session of its own whose parent has already exited.
SPAWNER = """
import os, subprocess, sys, time
subprocess.Popen(["sleep", "300"], process_group=0)
subprocess.Popen(["sh", "-c", "setsid sleep 300 & exit 0"]).wait()
print("ready", flush=True)
time.sleep(300)
"""


def test_stop_tree_ends_every_group_and_the_sessions_own(tmp_path: Path) -> None:
    mark = new_mark()
    env = {**os.environ, MARK: mark, "TEST_STOP_TREE": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SPAWNER],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
    )
    family: dict[int, int] = {}
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        family = _family(proc.pid, f"TEST_STOP_TREE={tmp_path}")
        # The spawner, its sh (gone), the sleep in its own group, the orphan in its own session.
        assert len(family) == 3, family
        assert set(tree(proc.pid, mark)) == set(family)
        assert set(tree(proc.pid)) < set(family)  # without the mark the orphan is not found
        stop_tree(proc.pid, proc.poll, mark, grace=2.0)
        proc.wait(timeout=10)
        assert _alive(family) == []
    finally:
        for pid in _alive(family):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


class Said:
    """A reporter that keeps its progress lines."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def start(self, label: str, total: int | None) -> object:
        return label

    def advance(self, handle: object, amount: int) -> None:
        pass

    def done(self, handle: object) -> None:
        pass

    def note(self, message: str) -> None:
        pass

    def status(self, message: str) -> None:
        pass

    def progress(self, message: str) -> None:
        self.lines.append(message)


def test_a_silent_compile_still_gets_a_line_every_period(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile that writes nothing for a long time (one huge object) is still reported, at
    least every PERIOD seconds (30 s; shortened here), and each object ninja finishes at once."""
    import verl_bundle.compile.run as compile_run

    monkeypatch.setattr(compile_run, "PERIOD", 0.4)
    monkeypatch.setattr(compile_run, "POLL", 0.05)
    script = "sleep 1.5; echo '[1/2] nvcc -c a.cu'; sleep 0.3; echo '[2/2] nvcc -c b.cu'"
    log = tmp_path / "c.log"
    said = Said()
    watch = CompileWatch("x", log, 0, time.monotonic())
    code = compile_run.run_logged(
        ["sh", "-c", script], dict(os.environ), tmp_path, log, watch, said
    )
    assert code == 0
    quiet = [line for line in said.lines if "objects" not in line]
    assert len(quiet) >= 3, said.lines  # 1.5 s with nothing written: a line each 0.4 s
    assert all(line.startswith("x: compiling: ") and "so far" in line for line in quiet)
    assert any(line.startswith("x: compiling: 1 of 2 objects, ") for line in said.lines)
    assert (tmp_path / ".elapsed").read_text().strip().isdigit()  # kept for a resume


def test_the_watch_reads_ninjas_steps_as_they_are_written(tmp_path: Path) -> None:
    log = tmp_path / "x.log"
    log.write_text("running build_ext\n")
    watch = CompileWatch("flash-attn", log, 0, started=1000.0, estimate=3600.0)
    assert not watch.read()
    # Before any object: the estimate less the time spent.
    assert watch.line(1600.0) == "flash-attn: compiling: 10m00s so far, about 50 min left"
    with log.open("a") as f:
        f.write("[1/4] nvcc -c a.cu\n[2/4] nvcc -c b.cu\n[3/4] nvcc -c c")  # c: still writing
    assert watch.read() and (watch.done, watch.total) == (2, 4)
    # This run's rate: 2 objects in 20 min, 2 to go.
    assert (
        watch.line(2200.0)
        == "flash-attn: compiling: 2 of 4 objects, 20m00s so far, about 20 min left"
    )
    with log.open("a") as f:
        f.write(".cu\n")
    assert watch.read() and watch.done == 3
    assert not watch.read()
    resumed = CompileWatch("x", log, log.stat().st_size, started=0.0, earlier=7200.0)
    assert resumed.line(60.0) == "x: compiling: 2h01m so far"


def test_the_estimate_before_a_host_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    two = host_estimate("flash-attn", "8.0;9.0", 2, "auto")
    assert two.line() == (
        "flash-attn: compiling here for sm80,sm90: about 3.0 h on these 2 cores at MAX_JOBS=2 "
        "(2 GPU architectures (sm80, sm90) at ~180 CPU-core-minutes each, measured on the "
        "online host); --compile never leaves it to the server, --cuda-archs 9.0 halves it"
    )
    # One job on two cores: twice the time; --compile always: no word about never.
    one = host_estimate("flash-attn", "9.0", 1, "always")
    assert one.line().startswith("flash-attn: compiling here for sm90: about 3.0 h on these 2")
    assert "--compile never" not in one.line() and "--cuda-archs" not in one.line()
    assert host_estimate("tinycuda", "9.0", 2, "auto").minutes is None


def test_the_server_compiles_what_the_package_compiles_by_default() -> None:
    """flash-attn's setup.py: sm80 and sm90 up to 2.7; 2.8 adds sm100 and sm120 with nvcc 12.8+;
    architectures the profile names win, in either spelling."""
    assert server_default_archs("flash-attn", "2.7.3", "12.1") == ("8.0", "9.0")
    assert server_default_archs("flash-attn", "2.8.3", "13.0") == ("8.0", "9.0", "10.0", "12.0")
    assert server_default_archs("flash-attn", "2.8.3", "12.4") == ("8.0", "9.0")
    assert server_default_archs("apex", "1.0", "13.0") == ()
    own = SourceBuild("flash-attn", (), env={"FLASH_ATTN_CUDA_ARCHS": "90;120"})
    assert server_build_time(own, "2.8.3", "13.0") == BuildTime(180.0, ("9.0", "12.0"))
