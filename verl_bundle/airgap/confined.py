"""Every write the server program makes, confined to a directory the tool owns.

A prefix, its `.verl-bundle/` state, a work or temporary directory the tool made: each is
opened once as a `Confined` root (its real path, every component opened with O_NOFOLLOW, none
writable by every user unless sticky), and every write below it walks from that descriptor
component by component with O_NOFOLLOW, so no symbolic link planted before or during the run is
ever followed:
- `create` opens with O_EXCL (never an existing file or link), `write_atomic` writes a fresh
  hidden name and renames it over the final one (a link there is replaced, never its target),
  `append` appends only to a regular file with one link (`fresh`: a new file in place of
  whatever had the name, a link itself removed first);
- `remove` unlinks a link itself, never its target, and removes a tree descriptor by
  descriptor; `links_leaving` names the links under a directory whose target leaves the root
  (what the install removes, or refuses, before pip or uv write there by path).
A file the operator names outside the root (`--log FILE`, `--events FILE`) is opened by
`append_outside`; an output beside one (`--image FILE`) is written by `Beside`: in a private
directory made next to it, renamed into place, with an existing link or non-regular file
refused at the start. Standard library only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from typing import IO, Any, Callable, Iterator, Sequence

from verl_bundle.airgap.errors import StepError

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WRITE = os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class UnsafePathError(StepError, OSError):
    """A write refused because it would leave the directory it belongs in: a symbolic link on
    the way, '..', a component that is not a directory, a file that is not a regular one, or a
    parent directory every user can write. An OSError too, so a caller that goes on without a
    file it cannot write (a log) goes on without this one."""


def _refuse(where: str, why: str) -> UnsafePathError:
    return UnsafePathError(f"{where}: {why}; nothing was written there")


def _check_dir(fd: int, where: str) -> None:
    """A directory every user may write and that is not sticky lets anyone swap what is
    opened through it next: refused."""
    st = os.fstat(fd)
    if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
        raise _refuse(where, "a directory every user can write (and not sticky)")


def open_dir(path: str, make: bool = False, mode: int = 0o755) -> int:
    """A descriptor of the directory at the real path of `path`, each component opened with
    O_NOFOLLOW from / and checked (`_check_dir`); `make`: the missing ones are created."""
    real = os.path.realpath(path)
    parts = [p for p in real.split("/") if p]
    fd = _descend(os.open("/", _DIR), parts, make, mode, lambda i: "/" + "/".join(parts[: i + 1]))
    try:
        _check_dir(fd, real)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _descend(
    fd: int,
    parts: Sequence[str],
    make: bool,
    mode: int,
    where: Callable[[int], str],
    checked: bool = True,
) -> int:
    """From the directory `fd` (taken over: returned or closed) down through `parts`, each
    opened with O_NOFOLLOW from the one above, and made first where missing when `make`;
    `checked`: a directory on the way that every user can write is refused (`_check_dir`).
    `where(i)` is the path down to parts[i], for a refusal (`where(-1)`: `fd`'s own)."""
    try:
        for i, part in enumerate(parts):
            if checked:
                _check_dir(fd, where(i - 1))
            try:
                nxt = os.open(part, _DIR, dir_fd=fd)
            except FileNotFoundError:
                if not make:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, mode, dir_fd=fd)
                nxt = os.open(part, _DIR, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise _refuse(where(i), "a symbolic link or not a directory") from None
                raise
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise _refuse(rel or "''", "not a plain relative path")
    return parts


def _regular(fd: int, where: str) -> int:
    """`fd` when it is a regular file with one name (a hard link to a file elsewhere would
    let a write reach it), else closed and refused."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        what = "not a regular file" if not stat.S_ISREG(st.st_mode) else "a file with other links"
        raise _refuse(where, what)
    return fd


class Confined:
    """A directory the tool owns, held open; every path below it is a plain relative one."""

    def __init__(self, root: str, make: bool = False, fd: int | None = None) -> None:
        self.root = os.path.abspath(root)
        self.real = os.path.realpath(root)
        self.fd = open_dir(root, make) if fd is None else fd

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Confined:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def path(self, rel: str = "") -> str:
        """The path a tool run by path (uv, pip, mksquashfs) is given for `rel`."""
        return os.path.join(self.root, *rel.split("/")) if rel else self.root

    def inside(self, path: str) -> bool:
        """Whether `path`'s real path is the root's or below it."""
        real = os.path.realpath(path)
        return real == self.real or real.startswith(self.real.rstrip(os.sep) + os.sep)

    def rel(self, path: str) -> str | None:
        """`path` (whose real path is inside the root) relative to the root's real path, with
        its last component as given (a link is named, not followed); None when outside."""
        parent = os.path.realpath(os.path.dirname(os.path.abspath(path)))
        full = os.path.join(parent, os.path.basename(path))
        if not full.startswith(self.real.rstrip(os.sep) + os.sep):
            return None
        return os.path.relpath(full, self.real).replace(os.sep, "/")

    # -- walking ---------------------------------------------------------------------------------

    def _dir(self, parts: list[str], make: bool, mode: int = 0o755) -> int:
        """A descriptor of the directory `parts` below the root, no link followed."""

        def where(i: int) -> str:
            return self.path("/".join(parts[: i + 1]))

        return _descend(os.dup(self.fd), parts, make, mode, where, checked=False)

    @contextlib.contextmanager
    def _parent(self, rel: str, make: bool) -> Iterator[tuple[int, str]]:
        parts = _parts(rel)
        fd = self._dir(parts[:-1], make)
        try:
            yield fd, parts[-1]
        finally:
            os.close(fd)

    def sub(self, rel: str, make: bool = False, mode: int = 0o755) -> Confined:
        """The directory `rel` below the root as a root of its own (made when `make`)."""
        fd = self._dir(_parts(rel), make, mode)
        return Confined(self.path(rel), fd=fd)

    def lstat(self, rel: str) -> os.stat_result | None:
        """`rel`'s own status (a link's, not its target's), or None when it is not there."""
        try:
            with self._parent(rel, False) as (fd, name):
                return os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            return None
        except UnsafePathError:
            return None

    def exists(self, rel: str) -> bool:
        return self.lstat(rel) is not None

    def makedirs(self, rel: str, mode: int = 0o755) -> None:
        os.close(self._dir(_parts(rel), True, mode))

    # -- writing ---------------------------------------------------------------------------------

    def create(self, rel: str, mode: int = 0o644) -> int:
        """A new file, opened for writing (O_EXCL: never an existing file or link)."""
        flags = _WRITE | os.O_CREAT | os.O_EXCL
        with self._parent(rel, True) as (fd, name):
            return os.open(name, flags, mode, dir_fd=fd)

    def append(self, rel: str, fresh: bool = False, mode: int = 0o644) -> IO[str]:
        """A log to append to, made when missing: only a regular file with one link is
        opened, a link or a FIFO there is refused. `fresh`: a new, empty file instead, made
        with O_EXCL after whatever had the name (a file, or a link itself) is removed."""
        with self._parent(rel, True) as (fd, name):
            flags = _WRITE | os.O_CREAT | os.O_APPEND
            if fresh:
                with contextlib.suppress(FileNotFoundError):
                    if stat.S_ISDIR(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode):
                        raise _refuse(self.path(rel), "a directory is there")
                    os.unlink(name, dir_fd=fd)
                flags |= os.O_EXCL
            try:
                out = os.open(name, flags, mode, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO):
                    raise _refuse(self.path(rel), "a symbolic link or not a regular file") from None
                raise
        _regular(out, self.path(rel))
        os.set_blocking(out, True)
        return open(out, "a", encoding="utf-8")

    def write_atomic(self, rel: str, data: bytes | str, mode: int = 0o644) -> None:
        """`rel` whole or not at all: a fresh hidden name (O_EXCL), renamed over `rel` (which
        replaces a link there, never its target)."""
        raw = data.encode("utf-8") if isinstance(data, str) else data
        with self._parent(rel, True) as (fd, name):
            tmp = f".{name}.partial-{os.getpid()}-{os.urandom(4).hex()}"
            try:
                out = os.open(tmp, _WRITE | os.O_CREAT | os.O_EXCL, mode, dir_fd=fd)
                os.set_blocking(out, True)
                with open(out, "wb") as fh:
                    fh.write(raw)
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise

    def write_stream(self, rel: str, src: IO[bytes], mode: int = 0o644) -> None:
        """Everything left in `src` as `rel`, whole or not at all (`write_atomic`'s hidden
        name, in blocks)."""
        with self._parent(rel, True) as (fd, name):
            tmp = f".{name}.partial-{os.getpid()}-{os.urandom(4).hex()}"
            try:
                out = os.open(tmp, _WRITE | os.O_CREAT | os.O_EXCL, mode, dir_fd=fd)
                os.set_blocking(out, True)
                with open(out, "wb") as dst:
                    while True:
                        block = src.read(1 << 20)
                        if not block:
                            break
                        dst.write(block)
                    os.fchmod(dst.fileno(), mode)  # the mode asked for, whatever the umask
                os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp, dir_fd=fd)
                raise

    def copy_in(self, source: str, rel: str, mode: int | None = None) -> None:
        """A copy of the file `source` (read through, wherever it is) as `rel`, whole or not
        at all; its mode, unless `mode` is given."""
        with open(source, "rb") as src:
            bits = mode if mode is not None else stat.S_IMODE(os.fstat(src.fileno()).st_mode)
            self.write_stream(rel, src, bits)

    def link_in(self, source: str, rel: str) -> bool:
        """`source` as `rel`: a hard link (True), or a copy where a link cannot be made (across
        file systems: False); under a fresh hidden name, renamed when whole."""
        with self._parent(rel, True) as (fd, name):
            tmp = f".{name}.partial-{os.getpid()}-{os.urandom(4).hex()}"
            try:
                os.link(source, tmp, dst_dir_fd=fd, follow_symlinks=False)
            except OSError as exc:
                if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
                    raise
            else:
                try:
                    os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(tmp, dir_fd=fd)
                    raise
                return True
        self.copy_in(source, rel)
        return False

    def copytree_in(self, source: str, rel: str, skip: tuple[str, ...] = ("__pycache__",)) -> None:
        """The tree `source` (regular files and directories; links and anything else left out)
        as the new directory `rel`, which must not exist."""
        with self._parent(rel, True) as (fd, name):
            os.mkdir(name, 0o755, dir_fd=fd)
        for dirpath, dirnames, filenames in os.walk(source):
            dirnames[:] = sorted(d for d in dirnames if d not in skip)
            here = os.path.relpath(dirpath, source).replace(os.sep, "/")
            base = rel if here == "." else f"{rel}/{here}"
            for d in dirnames:
                if not os.path.islink(os.path.join(dirpath, d)):
                    self.makedirs(f"{base}/{d}")
            for f in sorted(filenames):
                full = os.path.join(dirpath, f)
                if os.path.isfile(full) and not os.path.islink(full):
                    self.copy_in(full, f"{base}/{f}")

    def replace(self, src: str, dst: str) -> None:
        """Rename `src` to `dst`, both below the root (a link at `dst` is replaced itself)."""
        with self._parent(src, False) as (sfd, sname), self._parent(dst, True) as (dfd, dname):
            os.replace(sname, dname, src_dir_fd=sfd, dst_dir_fd=dfd)

    def chmod(self, rel: str, mode: int) -> None:
        """The mode of the regular file `rel` (opened without following a link)."""
        with self._parent(rel, False) as (fd, name):
            out = os.open(
                name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=fd
            )
        try:
            if not stat.S_ISREG(os.fstat(out).st_mode):
                raise _refuse(self.path(rel), "not a regular file")
            os.fchmod(out, mode)
        finally:
            os.close(out)

    def remove(self, rel: str) -> bool:
        """Remove `rel`: a file or a link (the link itself, never its target), or a directory
        tree, descriptor by descriptor without following a link. False when it was not there."""
        try:
            with self._parent(rel, False) as (fd, name):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    return False
                if stat.S_ISDIR(st.st_mode):
                    _rmtree_at(fd, name)
                else:
                    os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            return False
        return True

    def rmdir(self, rel: str) -> bool:
        """Remove the directory `rel` when it is empty; False otherwise."""
        try:
            with self._parent(rel, False) as (fd, name):
                os.rmdir(name, dir_fd=fd)
        except OSError:
            return False
        return True

    def listdir(self, rel: str = "") -> list[str]:
        """The names in the directory `rel` (none when it is not a directory below the root)."""
        try:
            fd = self._dir(_parts(rel), False) if rel else os.dup(self.fd)
        except (FileNotFoundError, UnsafePathError):
            return []
        try:
            return sorted(os.listdir(fd))
        finally:
            os.close(fd)

    # -- links that leave ------------------------------------------------------------------------

    def links_leaving(self, rel: str = "", depth: int | None = None) -> list[tuple[str, str]]:
        """(path relative to the root, where it leads) for each symbolic link under `rel`
        (`depth`: that many levels down; None: all) whose target is outside the root, and for
        `rel` itself when it is such a link. A dangling link leads outside when its target's
        path does."""
        out: list[tuple[str, str]] = []
        start = self.path(rel)
        if os.path.islink(start):
            if not self.inside(start):
                out.append((rel, os.path.realpath(start)))
            return out
        # os.scandir's entries know whether they are links from the directory itself (d_type):
        # no stat per file, which matters for 90,000 files.
        todo = [(start, 0)]
        while todo:
            folder, level = todo.pop()
            try:
                entries = list(os.scandir(folder))
            except OSError:
                continue
            for entry in entries:
                if entry.is_symlink():
                    if not self.inside(entry.path):
                        found = os.path.relpath(entry.path, self.root).replace(os.sep, "/")
                        out.append((found, os.path.realpath(entry.path)))
                elif entry.is_dir(follow_symlinks=False) and (depth is None or level + 1 < depth):
                    todo.append((entry.path, level + 1))
        return sorted(out)


def _rmtree_at(parent: int, name: str) -> None:
    fd = os.open(name, _DIR, dir_fd=parent)
    try:
        for entry in os.scandir(fd):
            if entry.is_dir(follow_symlinks=False):
                _rmtree_at(fd, entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent)


# -- files the operator names outside the root ------------------------------------------------------


def append_outside(path: str, what: str) -> IO[str]:
    """The file the operator named (`what`: "--log FILE"), opened to append: its directory by
    its real path (`open_dir`), the file itself with O_NOFOLLOW; a link, a FIFO or a file with
    other links there is refused (UnsafePathError, one line)."""
    full = os.path.abspath(path)
    try:
        fd = open_dir(os.path.dirname(full))
    except UnsafePathError as exc:
        raise UnsafePathError(f"{what} {path}: {exc.message}") from None
    try:
        try:
            out = os.open(
                os.path.basename(full), _WRITE | os.O_CREAT | os.O_APPEND, 0o644, dir_fd=fd
            )
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):
                raise _refuse(f"{what} {path}", "a symbolic link or not a regular file") from None
            raise
    finally:
        os.close(fd)
    _regular(out, f"{what} {path}")
    os.set_blocking(out, True)
    return open(out, "a", encoding="utf-8")


def check_output(path: str, what: str) -> None:
    """An output the tool will rename into place at `path`: refused (UnsafePathError) when
    something other than a regular file is there already (a link, a directory, a FIFO)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise _refuse(f"{what} {path}", "a symbolic link is there")
    if not stat.S_ISREG(st.st_mode):
        kind = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise _refuse(f"{what} {path}", f"{kind} is there")


class Beside:
    """Outputs that end as files next to `target` (`--image FILE` and its FILE.sha256):
    written in a private directory made beside it (mode 0700, a fresh name), each renamed into
    place when whole; the directory goes at the end, whatever happened."""

    def __init__(self, target: str) -> None:
        self.target = os.path.abspath(target)
        self.dir = Confined(os.path.dirname(self.target))
        base = os.path.basename(self.target)
        name = ""
        for _ in range(100):
            name = f".{base}.partial-{os.urandom(6).hex()}"
            try:
                os.mkdir(name, 0o700, dir_fd=self.dir.fd)
                break
            except FileExistsError:
                continue
        self.name = name
        self.work = self.dir.sub(name)

    def path(self, name: str) -> str:
        """Where a tool run by path writes the output `name` (inside the private directory)."""
        return self.work.path(name)

    def commit(self, name: str, final: str) -> str:
        """The private `name`, renamed to `final` beside the target (a file name); returns its
        path. Only a regular file is renamed, and never over a link or a directory."""
        st = self.work.lstat(name)
        if st is None or not stat.S_ISREG(st.st_mode):
            raise _refuse(self.work.path(name), "not a regular file")
        dest = os.path.join(os.path.dirname(self.target), final)
        check_output(dest, "the output")
        os.replace(name, final, src_dir_fd=self.work.fd, dst_dir_fd=self.dir.fd)
        return dest

    def close(self) -> None:
        self.work.close()
        with contextlib.suppress(OSError):
            self.dir.remove(self.name)
        self.dir.close()

    def __enter__(self) -> Beside:
        return self

    def __exit__(self, *_: Any) -> None:
        self.close()
