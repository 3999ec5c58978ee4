"""The target environment: its interpreter, whether the prefix may be used, the venv, and the
pip and uv the bundle brings. Nothing here reads this machine's pip or uv configuration."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass

from verl_bundle.airgap.confined import Confined, UnsafePathError
from verl_bundle.airgap.contract.manifest import Manifest
from verl_bundle.airgap.errors import ServerNotReadyError, StepError, UsageError
from verl_bundle.airgap.install import bundled
from verl_bundle.airgap.install.dists import SitePaths
from verl_bundle.airgap.install.options import Options
from verl_bundle.airgap.install.state import State

# Variables that would let this machine change what an isolated install does.
_DROP = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "PYTHONUSERBASE", "PYTHONINSPECT")
OFFLINE = {
    # No config file, no index, no cache outside the prefix, no questions.
    "PIP_CONFIG_FILE": os.devnull,
    "PIP_NO_INDEX": "1",
    "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    "PIP_NO_INPUT": "1",
    "PIP_NO_CACHE_DIR": "1",
    "UV_NO_CONFIG": "1",
    "UV_OFFLINE": "1",
    "UV_NO_INDEX": "1",
    "UV_PYTHON_DOWNLOADS": "never",
    "UV_NO_PROJECT": "1",  # `uv venv` never looks for a pyproject.toml around the cwd
    "PYTHONNOUSERSITE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
}


def clean_environ() -> dict[str, str]:
    """This process's environment with every PIP_*/UV_* variable and the PYTHONPATH family
    removed, and the offline settings added: what every command of the install runs with."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "UV_")) and k not in _DROP
    }
    env.update(OFFLINE)
    return env


def python_version(python: str) -> str | None:
    """`python`'s X.Y: this interpreter's own when it is the same binary (no second start),
    else asked."""
    try:
        if os.path.realpath(python) == os.path.realpath(sys.executable):
            return f"{sys.version_info[0]}.{sys.version_info[1]}"
    except OSError:
        pass
    try:
        proc = subprocess.run(
            [python, "-c", 'import sys; print("%d.%d" % sys.version_info[:2])'],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            timeout=60,
            env=clean_environ(),
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def _python_fix(m: Manifest) -> str:
    v = m.target.python
    return (
        f"Install Python {v} from the OS install media or the intranet mirror (apt: python{v} "
        f"python{v}-venv python{v}-dev; dnf/yum: python{v.replace('.', '')}) and pass "
        f"--python /path/to/python{v}"
    )


def choose_python(opts: Options, m: Manifest, target: str) -> str:
    """The interpreter the environment runs: --into-env's, --python, the prefix's own (a
    rerun), python<X.Y>, python3. ServerNotReadyError when none is found."""
    own = os.path.join(target, "bin", "python")
    if opts.into_env:
        return own
    carried = bundled.chosen(opts, m)
    if carried is not None:
        return carried
    if opts.python:
        return opts.python
    if os.access(own, os.X_OK):
        return own
    want = m.target.python
    dead: list[str] = []
    first: str | None = None  # the first python3 that runs, for the wrong-Python sentence
    for name in (f"python{want}", "python3"):
        for found in on_path(name):
            got = python_version(found)
            if got is None:  # a pyenv shim outside its context exits 127: try the next
                dead.append(found)
            elif got == want:
                return found
            elif first is None:
                first = found
        if name != "python3" and python_version(sys.executable) == want:
            return sys.executable  # the interpreter install.sh found running this installer
    if first is not None:
        return first
    passed = (
        f" ({', '.join(dead)} did not report a version: a pyenv shim outside its context does "
        "not run)"
        if dead
        else ""
    )
    raise ServerNotReadyError(
        f"no Python {want} or python3 runs here{passed}. This bundle needs Python {want}: "
        f"{_python_fix(m)}",
    )


def on_path(name: str) -> list[str]:
    """Every executable `name` in PATH's directories, in order (not only the first, which a
    shim may shadow), each once."""
    found: list[str] = []
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or ".", name)
        if os.path.isfile(path) and os.access(path, os.X_OK) and path not in found:
            found.append(path)
    return found


def check_python(python: str, m: Manifest, got: str | None = None) -> str:
    """The interpreter's X.Y (`got` where already asked), or ServerNotReadyError with the
    "wrong or old Python" sentence; one that reports no version is said as such, never as a
    Python to build for."""
    got = got or python_version(python)
    want = m.target.python
    if got is None:
        raise ServerNotReadyError(
            f"{python} does not run (it reported no version; a pyenv shim outside its context "
            f"exits 127). This bundle's wheels are built for Python {want} "
            f"({m.target.python_tag}).\n{_python_fix(m)}.",
        )
    if got != want:
        raise ServerNotReadyError(
            f"{python} is Python {got}, but this bundle's wheels are built for Python {want} "
            f"({m.target.python_tag}).\n{_python_fix(m)}, or build a bundle for Python {got} "
            f"(verl-bundle build --python {got}).",
        )
    return got


NO_VERSION = "not running (it reported no version)"  # said of it, never "Python unknown"


def shown_version(python: str) -> str:
    """ "3.10", or NO_VERSION for an interpreter that reports none."""
    return python_version(python) or NO_VERSION


def lock_prefix(target: str) -> Confined:
    """The target directory (made when new), opened by its real path with no link followed
    (airgap/confined.py) and flocked for the whole install: a second install.sh on the same
    prefix is refused in one line, not raced. Every write of the install into the prefix goes
    through the descriptor this returns."""
    try:
        prefix = Confined(target, make=True)
    except UnsafePathError as exc:
        raise UsageError(
            f"--prefix {target}: {exc.message}; give a directory only you can write"
        ) from None
    except OSError as exc:
        raise UsageError(
            f"--prefix {target}: cannot make or open it ({exc.strerror or exc}); give a "
            "directory you can write"
        ) from None
    try:
        fcntl.flock(prefix.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        prefix.close()
        raise StepError(
            f"another install.sh is installing into {target}; wait for it to end, then run "
            "this one again"
        ) from None
    return prefix


def unlock_prefix(prefix: Confined, made: bool) -> None:
    """Release the lock; a prefix this run made and left empty goes again."""
    prefix.close()
    if made:
        with contextlib.suppress(OSError):
            os.rmdir(prefix.root)  # only when empty


def check_prefix(opts: Options, target: str) -> str:
    """Whether the target may be installed into: "new", "ours" (a venv this installer made),
    or "env" (--into-env). Anything else is refused: an existing Python installation, a venv
    made by someone else, a non-empty directory."""
    if opts.into_env:
        if not os.access(os.path.join(target, "bin", "python"), os.X_OK):
            raise UsageError(f"--into-env {target}: no bin/python there; give a venv or conda env")
        return "env"
    if not os.path.lexists(target):
        return "new"
    if not os.path.isdir(target):
        raise UsageError(f"--prefix {target}: not a directory; give a new directory")
    state = State(target)
    if state.made_venv() or (
        state.legacy_venv() and os.path.isfile(os.path.join(target, "pyvenv.cfg"))
    ):
        return "ours"
    # Nothing but the bundled CPython install.sh unpacked there: still a new prefix.
    if not set(os.listdir(target)) - {"python"} and _only_bundled(target):
        return "new"
    on_purpose = f"give a new directory, or --into-env {target} to install into it on purpose"
    if os.path.isfile(os.path.join(target, "pyvenv.cfg")):
        what = "a venv this installer did not make"
    elif any(os.path.exists(os.path.join(target, "bin", n)) for n in ("python", "python3")):
        what = "an existing Python installation, not a venv this installer made"
    else:
        what = "a directory that is not empty and not a venv this installer made"
    raise UsageError(f"--prefix {target}: {what}; {on_purpose}")


def _only_bundled(target: str) -> bool:
    inside = os.path.join(target, "python")
    return not os.path.lexists(inside) or os.path.isfile(os.path.join(inside, bundled.MARK))


def venv_command(python: str, target: str, uv: str | None = None) -> list[str]:
    """The venv, made by the bundled uv where it runs (a tenth of `python -m venv`'s time and
    no second interpreter start), else by the interpreter itself; without pip either way (the
    bundled pip comes with the first phase, phases.with_pip)."""
    if uv is not None:
        return [uv, "venv", "--quiet", "--allow-existing", "--python", python, target]
    return [python, "-m", "venv", "--without-pip", target]


def site_paths(python: str, prefix: str) -> SitePaths:
    """sysconfig's install paths of the target interpreter (a venv's or a conda env's)."""
    code = "import json, sys, sysconfig; print(json.dumps(sysconfig.get_paths()))"
    proc = subprocess.run(
        [python, "-I", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_environ(),
    )
    if proc.returncode != 0:
        raise ServerNotReadyError(f"{python} does not run: {proc.stderr.strip()[-300:]}")
    paths = json.loads(proc.stdout)
    return SitePaths(prefix, paths["purelib"], paths["platlib"], paths["scripts"], paths["data"])


def versions_in(python: str) -> dict[str, str]:
    """name -> version of every distribution the interpreter sees (for --into-env)."""
    code = (
        "import json, re\n"
        "from importlib import metadata as m\n"
        "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version "
        "for d in m.distributions() if d.metadata['Name']}))"
    )
    proc = subprocess.run(
        [python, "-I", "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        timeout=120,
        env=clean_environ(),
    )
    try:
        doc = json.loads(proc.stdout) if proc.returncode == 0 else {}
    except ValueError:
        doc = {}
    return {str(k): str(v) for k, v in doc.items()}


# -- pip and uv ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tools:
    """How packages get installed: the bundled pip (run from its wheel, or the venv's pip) and
    the bundled uv where it runs on this machine."""

    python: str  # the target interpreter
    pip: tuple[str, ...]
    uv: str | None
    pip_wheel: str | None  # the bundled pip wheel (bootstrapped into a new venv)

    def uv_env(self, state: State) -> dict[str, str]:
        # uv's cache stays inside the prefix and goes when the phase is done (installed files
        # are hard links or copies, not references into it).
        return {"UV_CACHE_DIR": state.path("uv-cache")}


def _uv_member(wheel: str) -> str | None:
    with zipfile.ZipFile(wheel) as zf:
        return next((n for n in zf.namelist() if n.endswith(".data/scripts/uv")), None)


def _extract_uv(wheel: str, into: Confined, rel: str) -> bool:
    """The uv binary of the bundled uv wheel as `rel` below `into` (whole or not at all)."""
    try:
        member = _uv_member(wheel)
        if member is None:
            return False
        with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
            into.write_stream(rel, src, stat.S_IRWXU)
        return True
    except (OSError, zipfile.BadZipFile):
        return False


def _runs(uv: str) -> bool:
    try:
        proc = subprocess.run(
            [uv, "--version"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return proc.returncode == 0


UV = "uv/uv"  # the bundled uv, in the state directory
EARLY_UV = "verl-bundle-uv-"
EARLY_LOCK = ".lock"


def sweep_early_uv(tmpdir: str) -> None:
    """Remove the early uv directories a killed install left in `tmpdir`: ours (owned by this
    user, not links) whose lock no live install holds."""
    try:
        names = [n for n in os.listdir(tmpdir) if n.startswith(EARLY_UV)]
    except OSError:
        return
    for name in names:
        full = os.path.join(tmpdir, name)
        try:
            st = os.lstat(full)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            fd = os.open(os.path.join(full, EARLY_LOCK), os.O_RDWR | os.O_NOFOLLOW)
        except OSError:
            continue  # not ours, or an older installer's (no lock): left alone
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # a live install's
        finally:
            os.close(fd)
        shutil.rmtree(full, ignore_errors=True)


class EarlyUv:
    """The bundled uv unpacked from its wheel (~40 MB inflated, a third of a second) on a
    thread while the doctor runs, into a private temporary directory (mkdtemp), held by an
    flock on its .lock so that the next install removes it if this one is killed. It is run
    only after find_tools has it: by then the venv step has verified the wheel it came from."""

    def __init__(self, m: Manifest, bundle: str) -> None:
        uv_file = m.bootstrap_file("uv")
        self.tmp: Confined | None = None
        self.lock = -1
        self.ok = False
        self.thread: threading.Thread | None = None
        if uv_file is None:
            return
        sweep_early_uv(tempfile.gettempdir())
        try:
            self.tmp = Confined(tempfile.mkdtemp(prefix=EARLY_UV))
            self.lock = self.tmp.create(EARLY_LOCK, 0o600)
            fcntl.flock(self.lock, fcntl.LOCK_EX)
        except OSError:
            return  # no temporary directory: find_tools unpacks it as before
        wheel = os.path.join(bundle, uv_file.path)
        self.thread = threading.Thread(target=self._unpack, args=(wheel,), daemon=True)
        self.thread.start()

    def _unpack(self, wheel: str) -> None:
        self.ok = self.tmp is not None and _extract_uv(wheel, self.tmp, "uv")

    def take(self, into: Confined, rel: str) -> bool:
        """Move the unpacked uv to `rel` below `into`; False when there is none (then unpack
        it there)."""
        if self.thread is None or self.tmp is None or self.lock < 0:
            return False
        self.thread.join()
        if not self.ok:
            return False
        parent, _, name = rel.rpartition("/")
        try:
            target = into.sub(parent, make=True) if parent else None
            try:
                os.replace("uv", name, src_dir_fd=self.tmp.fd, dst_dir_fd=(target or into).fd)
                return True
            except OSError as exc:
                if exc.errno != errno.EXDEV:
                    raise
            finally:
                if target is not None:
                    target.close()
            into.copy_in(self.tmp.path("uv"), rel, stat.S_IRWXU)  # across file systems
        except OSError:
            return False
        return True

    def close(self) -> None:
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        if self.tmp is not None:
            shutil.rmtree(self.tmp.real, ignore_errors=True)
            self.tmp.close()
            self.tmp = None
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1


RUN_TMP = "tmp"  # in the state directory: each run's own TMPDIR, and its lock
TMP_VARS = ("TMPDIR", "TMP", "TEMP")


class RunTmp:
    """This run's own TMPDIR, `<prefix>/.verl-bundle/tmp/run-<random>/` (mode 0700), given to
    every command the install runs from the venv step on (pip's build and wheel-cache
    directories, nvcc's tmpxft_* files, the checks'), so a killed install leaves nothing in the
    machine's temporary directory. Held by an flock on its .lock; removed at the end, and a
    killed run's (no live lock) by the next run before it makes its own."""

    def __init__(self, state: State) -> None:
        self.state = state
        self.name = ""
        self.lock = -1
        self.saved: dict[str, str | None] = {}

    def start(self) -> str:
        confined = self.state.confined
        self.sweep()
        sweep_early_uv(tempfile.gettempdir())  # a killed run's early uv, whatever this run does
        top = confined.sub(RUN_TMP, make=True, mode=0o700)
        try:
            for _ in range(100):
                name = f"run-{os.urandom(6).hex()}"
                try:
                    os.mkdir(name, 0o700, dir_fd=top.fd)
                    break
                except FileExistsError:
                    continue
        finally:
            top.close()
        self.name = f"{RUN_TMP}/{name}"
        self.lock = confined.create(f"{self.name}/{EARLY_LOCK}", 0o600)
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        path = self.state.path(self.name)
        for var in TMP_VARS:
            self.saved[var] = os.environ.get(var)
            os.environ[var] = path
        return path

    def sweep(self) -> None:
        """Remove what killed runs left: each run directory whose lock no live run holds."""
        confined = self.state.confined
        for name in confined.listdir(RUN_TMP):
            rel = f"{RUN_TMP}/{name}"
            if rel == self.name:
                continue
            try:
                with confined.sub(rel) as run:
                    fd = os.open(
                        EARLY_LOCK, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=run.fd
                    )
            except FileNotFoundError:
                confined.remove(rel)  # killed before its lock was made
                continue
            except OSError:
                confined.remove(rel)  # not a directory of ours: a link or a file
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # a live run's
            finally:
                os.close(fd)
            confined.remove(rel)

    def close(self) -> None:
        """The environment as it was, this run's directory removed (and tmp/ when empty)."""
        for var, value in self.saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        self.saved = {}
        if self.name:
            self.state.confined.remove(self.name)
            self.state.confined.rmdir(RUN_TMP)
            self.name = ""
        if self.lock >= 0:
            os.close(self.lock)
            self.lock = -1


def find_tools(
    m: Manifest,
    bundle: str,
    python: str,
    state: State,
    dry_run: bool,
    early: EarlyUv | None = None,
) -> Tools:
    """pip and uv for this install. The bundled uv is unpacked into the state directory (or
    moved there, unpacked `early`) and used where it runs; a dry run tries it in a temporary
    directory it removes again."""
    pip_file, uv_file = m.bootstrap_file("pip"), m.bootstrap_file("uv")
    pip_wheel = os.path.join(bundle, pip_file.path) if pip_file else None
    pip = (python, os.path.join(pip_wheel, "pip")) if pip_wheel else (python, "-m", "pip")
    uv = None
    if uv_file is not None:
        rel = UV
        dest = state.path(rel)
        wheel = os.path.join(bundle, uv_file.path)
        if os.path.exists(dest) and not os.path.islink(dest) and _runs(dest):
            uv = dest
        elif dry_run:
            with tempfile.TemporaryDirectory(prefix="verl-bundle-uv-") as tmp, Confined(
                tmp
            ) as into:
                uv = dest if _extract_uv(wheel, into, "uv") and _runs(into.path("uv")) else None
        elif (
            (early is not None and early.take(state.confined, rel))
            or _extract_uv(wheel, state.confined, rel)
        ) and _runs(dest):
            uv = dest
    return Tools(python, tuple(pip), uv, pip_wheel)
