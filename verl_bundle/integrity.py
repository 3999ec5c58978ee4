"""Is a wheel whole? Every hash its RECORD lists, and the CRC of every member it lists no hash
for, checked on the online host before the wheel enters a bundle: a release asset with no
published hash (or a wheel built here) has no other check, and a bad one would only fail on
the server."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import zipfile
import zlib
from pathlib import Path

from verl_bundle.errors import FetchError
from verl_bundle.net.cache import Cache
from verl_bundle.net.http import shown_url

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
    """The wheel at `path` (a cache blob, or a wheel built here) is whole, or it is evicted and
    FetchError names the file and where it came from. A pass is remembered by content hash, so
    a warm rebuild does not read the wheel again."""
    marker = cache.checked(sha256)
    if marker.is_file():
        return
    problem = wheel_problem(path)
    if problem is None:
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        return
    cache.evict(path, sha256, url)
    origin = "built on this host from " if built else ""
    raise FetchError(
        f"{package}: {filename} ({origin}{shown_url(url)}) "
        f"is a damaged wheel: {problem}; removed it from the cache. If the location serves a "
        "damaged file, get a good one there and re-run `verl-bundle lock`"
    )
