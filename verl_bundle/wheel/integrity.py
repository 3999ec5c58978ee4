"""Is a wheel whole? Checked on the online host before the wheel enters a bundle, at one of two
depths (measured on the real cu130 torch wheel, 531 MB, 12,482 members: 0.23 s against 4.4 s):

- `structure`: the zip's central directory, every member's local header where the directory
  says (its name, its data inside the file), RECORD read (its CRC checked) and every file it
  lists present. For a wheel whose bytes match a hash its source published (an index page, a
  hash pinned in the profile), this is all: those bytes are the very file the source serves,
  and inflating it again would find only what its sha256 already rules out.
- `whole`: every member inflated, each hash RECORD lists checked and the CRC of the members it
  lists none for. For a wheel nobody published a hash for (a release asset; the lock computed
  its hash from a download, and checks it whole then) and for wheels built on this host: no
  other check vouches for their content, and a bad one would only fail on the server.
"""

from __future__ import annotations

import base64
import csv
import dataclasses
import hashlib
import io
import json
import os
import struct
import threading
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from verl_bundle.errors import FetchError
from verl_bundle.net.cache import Cache
from verl_bundle.net.http import shown_url
from verl_bundle.wheel.licenses import declared, metadata_of_wheel

CHUNK = 1 << 20


def _record_name(names: list[str]) -> str | None:
    found = [
        n
        for n in names
        if n.count("/") == 1 and n.endswith("/RECORD") and n.split("/")[0].endswith(".dist-info")
    ]
    return found[0] if len(found) == 1 else None


def _record_hashes(data: bytes) -> dict[str, str]:
    """RECORD's `path -> urlsafe-base64 sha256` for the entries that carry a sha256."""
    out: dict[str, str] = {}
    for row in csv.reader(io.StringIO(data.decode("utf-8", errors="replace"))):
        if len(row) >= 2 and row[1].startswith("sha256="):
            out[row[0]] = row[1][len("sha256=") :].rstrip("=")
    return out


def _sha256_instead_of_crc(fh: object) -> None:
    """A member whose RECORD names its sha256 is checked by that hash, which catches every
    change the CRC would: the CRC pass is skipped (a third of the check's CPU). zipfile keeps
    the expected CRC in a private attribute (3.8 to 3.13); when it is not there, the CRC is
    checked as before."""
    if hasattr(fh, "_expected_crc"):
        fh._expected_crc = None


@dataclass(frozen=True)
class WheelFacts:
    """What the bundle's plan reads from a wheel, learned while its check has the zip open and
    remembered with the pass: its unpacked size (its members once installed) and the licence
    its METADATA declares ("" when none)."""

    unpacked: int
    license: str


def examine(path: str, whole: bool) -> tuple[str | None, WheelFacts]:
    """The check at its depth (`whole`, or the structure only), and the wheel's facts (empty
    when it is damaged). A worker process runs this: a path, not a Path, crosses."""
    try:
        with open(path, "rb") as raw, zipfile.ZipFile(raw) as zf:
            infos = zf.infolist()
            found = _structure_problem(zf, infos, raw.fileno())
            try:
                license = declared(metadata_of_wheel(zf))
            except (KeyError, UnicodeDecodeError):
                license = ""
            facts = WheelFacts(sum(i.file_size for i in infos), license)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        return f"the zip is damaged ({exc})", WheelFacts(0, "")
    except (NotImplementedError, ValueError, KeyError) as exc:
        return f"the zip cannot be read ({exc})", WheelFacts(0, "")
    if found is None and whole:
        found = wheel_problem(Path(path))
    return found, facts


def structure_problem(path: Path) -> str | None:
    """None when the wheel's structure is sound (see `structure`); else what is wrong."""
    return examine(str(path), whole=False)[0]


def _structure_problem(zf: zipfile.ZipFile, infos: list[zipfile.ZipInfo], fd: int) -> str | None:
    record = _record_name([i.filename for i in infos])
    if record is None:
        return "it has no single .dist-info/RECORD"
    hashes = _record_hashes(zf.read(record))
    missing = sorted(set(hashes) - {i.filename for i in infos})
    if missing:
        return f"its RECORD lists {missing[0]}, which the wheel lacks"
    return _local_headers_problem(fd, infos, zf.start_dir)


def _local_headers_problem(fd: int, infos: list[zipfile.ZipInfo], directory: int) -> str | None:
    """Each member's local header is where the central directory says, names the same file,
    and its data ends before the directory starts (what an installer reads to unpack it)."""
    for info in infos:
        head = os.pread(fd, 30, info.header_offset)
        if len(head) < 30 or head[:4] != b"PK\x03\x04":
            return f"the local header of {info.filename} is missing (the zip is damaged)"
        name_len, extra_len = struct.unpack("<HH", head[26:30])
        if info.header_offset + 30 + name_len + extra_len + info.compress_size > directory:
            return f"the data of {info.filename} runs past the zip's directory (the zip is damaged)"
        encoding = "utf-8" if info.flag_bits & 0x800 else "cp437"
        if os.pread(fd, name_len, info.header_offset + 30) != info.orig_filename.encode(encoding):
            return f"the local header of {info.filename} names another file (the zip is damaged)"
    return None


def wheel_problem(path: Path) -> str | None:
    """None when the wheel is whole; otherwise what is wrong with it, in a few words."""
    try:
        with zipfile.ZipFile(path) as zf:
            infos = zf.infolist()
            record = _record_name([i.filename for i in infos])
            hashes = _record_hashes(zf.read(record)) if record else {}
            present = {i.filename for i in infos}
            for info in infos:
                if info.is_dir():
                    continue
                want = hashes.get(info.filename)
                digest = hashlib.sha256()
                with zf.open(info) as fh:  # reading to the end checks the CRC
                    if want is not None:
                        _sha256_instead_of_crc(fh)
                    while chunk := fh.read(CHUNK):
                        if want is not None:
                            digest.update(chunk)
                got = base64.urlsafe_b64encode(digest.digest()).decode().rstrip("=")
                if want is not None and want != got:
                    return f"{info.filename} does not match the hash in its RECORD"
            missing = sorted(set(hashes) - present)
            if missing:
                return f"its RECORD lists {missing[0]}, which the wheel lacks"
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        return f"the zip is damaged ({exc})"
    except (NotImplementedError, ValueError, KeyError) as exc:
        return f"the zip cannot be read ({exc})"
    return None


def passed(cache: Cache, sha256: str, whole: bool) -> bool:
    """Whether the wheel with this hash passed the check at this depth before (a whole pass
    covers the structure too)."""
    return cache.checked(sha256).is_file() or (
        not whole and cache.checked(sha256, whole=False).is_file()
    )


def recorded(cache: Cache, sha256: str) -> WheelFacts | None:
    """The facts a passed check recorded for this wheel (None: none recorded)."""
    for marker in (cache.checked(sha256), cache.checked(sha256, whole=False)):
        try:
            doc = json.loads(marker.read_text(encoding="utf-8"))
            return WheelFacts(int(doc["unpacked"]), str(doc["license"]))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return None


def settle(
    cache: Cache,
    path: Path,
    sha256: str,
    problem: str | None,
    facts: WheelFacts,
    *,
    whole: bool,
    package: str,
    filename: str,
    url: str,
    built: bool = False,
) -> None:
    """Record a check's outcome: a pass is remembered by content hash with the wheel's facts
    (a warm rebuild opens no wheel again); a damaged wheel is evicted and FetchError names the
    file and where it came from."""
    if problem is None:
        marker = cache.checked(sha256, whole=whole)
        marker.parent.mkdir(parents=True, exist_ok=True)
        tmp = marker.with_name(f".{marker.name}.{os.getpid()}.{threading.get_ident()}")
        tmp.write_text(json.dumps(dataclasses.asdict(facts)) + "\n", encoding="utf-8")
        os.replace(tmp, marker)
        return
    cache.evict(path, sha256, url)
    origin = "built on this host from " if built else ""
    raise FetchError(
        f"{package}: {filename} ({origin}{shown_url(url)}) "
        f"is a damaged wheel: {problem}; removed it from the cache. If the location serves a "
        "damaged file, get a good one there and re-run `verl-bundle lock`"
    )


def ensure_whole(
    cache: Cache,
    path: Path,
    sha256: str,
    *,
    package: str,
    filename: str,
    url: str,
    built: bool = False,
) -> None:
    """The wheel at `path` (a cache blob, or a wheel built here) is whole, checked here and
    now (lock time: a file with no published hash), or evicted with FetchError."""
    if passed(cache, sha256, whole=True):
        return
    found, facts = examine(str(path), whole=True)
    settle(
        cache,
        path,
        sha256,
        found,
        facts,
        whole=True,
        package=package,
        filename=filename,
        url=url,
        built=built,
    )
