"""The licence each bundled file declares, and which of those an approver must read.

`declared` reads a wheel's METADATA (or an sdist's PKG-INFO) in the order an approver trusts:
the PEP 639 License-Expression, else a short License field, else the licence classifiers, else
the first line of a long License field, else nothing. `judge` says whether that is a known
open-source licence or one to review (NVIDIA's own, proprietary, vendor-defined, unknown, not
recognised), from the table in licenses.json. Both run on the online host only.
"""

from __future__ import annotations

import functools
import json
import re
import tarfile
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path
from typing import Any

from verl_bundle.airgap.render import printable

TABLE = Path(__file__).with_name("licenses.json")
UNKNOWN = "unknown"
SHORT = 100  # a License field longer than this (or of several lines) is the licence's text
_OPERATORS = {"AND", "OR", "WITH"}


@dataclass(frozen=True)
class Verdict:
    """`name`: the SPDX id or expression when recognised, else the text as declared, or
    "unknown"; `open`: a known open-source licence; `why`: what to review, "" when open."""

    name: str
    open: bool
    why: str = ""


@functools.cache
def table() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return data


@functools.cache
def _open_ids() -> dict[str, str]:
    return {i.casefold(): i for i in table()["open"]}


@functools.cache
def _aliases() -> dict[str, str]:
    return {a["text"].casefold(): a["spdx"] for a in table()["aliases"]}


def declared(metadata: str) -> str:
    """The licence a METADATA / PKG-INFO text declares, as written but printable (a terminal
    control in it becomes a visible escape such as `\\x1b`: the text goes into the manifest,
    LICENSES.txt and the SBOM, which approvers read in a terminal); "" when it declares none."""
    return printable(_declared(metadata))


def _declared(metadata: str) -> str:
    msg = HeaderParser().parsestr(metadata)
    expression = (msg.get("License-Expression") or "").strip()
    if expression:
        return expression
    field = (msg.get("License") or "").strip()
    if field.upper() == "UNKNOWN":
        field = ""
    if field and "\n" not in field and len(field) <= SHORT:
        return field
    classifiers = [
        _classifier_name(c) for c in msg.get_all("Classifier") or [] if c.startswith("License ::")
    ]
    named = [c for c in classifiers if c]
    if named:
        return "; ".join(dict.fromkeys(named))
    first = field.splitlines()[0].strip() if field else ""
    return first[:SHORT]


def _classifier_name(classifier: str) -> str:
    parts = [p.strip() for p in classifier.split("::")][1:]
    if parts and parts[0] == "OSI Approved":
        parts = parts[1:]
    return parts[-1] if parts else ""


def _spdx(term: str) -> str | None:
    """The SPDX id an id, alias or classifier name stands for, when it is a known open one."""
    key = term.strip().casefold()
    if key in _open_ids():
        return _open_ids()[key]
    alias = _aliases().get(key)
    return alias if alias is not None and alias.casefold() in _open_ids() else None


def _expression(text: str) -> str | None:
    """`text` as an SPDX expression of open licences only ("MIT OR Apache-2.0"), canonical
    case; None when any licence in it is not a known open one or it is not an expression."""
    tokens = re.findall(r"\(|\)|[^\s()]+", text)
    out: list[str] = []
    after_with = False
    for token in tokens:
        if token in ("(", ")"):
            out.append(token)
        elif token.upper() in _OPERATORS:
            out.append(token.upper())
            after_with = token.upper() == "WITH"
        elif after_with:  # an exception (LLVM-exception) adds permissions, it takes none away
            out.append(token)
            after_with = False
        else:
            spdx = _spdx(token)
            if spdx is None:
                return None
            out.append(spdx)
    return " ".join(out).replace("( ", "(").replace(" )", ")") if out else None


def judge(license: str) -> Verdict:
    """Whether `license` (as `declared` gave it) is a known open-source licence."""
    text = license.strip()
    if not text:
        return Verdict(UNKNOWN, False, "no licence declared: find its terms before approving")
    low = text.casefold()
    for mark in table()["review"]:
        if mark["word"] in low:
            return Verdict(text, False, mark["why"])
    parts = [p for p in re.split(r"\s*;\s*", text) if p]
    names = [_spdx(p) or _expression(p) for p in parts]
    if all(names):
        return Verdict(" OR ".join(dict.fromkeys(n for n in names if n)), True)
    return Verdict(text, False, "not a licence verl-bundle knows as open source: read it")


def of_file(path: Path) -> str:
    """The licence a wheel or sdist declares ("" when it declares none or cannot be read)."""
    try:
        if path.name.endswith(".whl"):
            with zipfile.ZipFile(path) as zf:
                return declared(metadata_of_wheel(zf))
        with tarfile.open(path) as tf:
            return declared(_pkg_info(tf))
    except (OSError, zipfile.BadZipFile, tarfile.TarError, KeyError, UnicodeDecodeError):
        return ""


def metadata_of_wheel(zf: zipfile.ZipFile) -> str:
    """The text of a wheel's .dist-info/METADATA (KeyError when it has none)."""
    name = next(
        (n for n in zf.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")),
        None,
    )
    if name is None:
        raise KeyError("METADATA")
    return zf.read(name).decode("utf-8")


def _pkg_info(tf: tarfile.TarFile) -> str:
    for member in tf:
        if member.name.count("/") == 1 and member.name.endswith("/PKG-INFO") and member.isfile():
            fh = tf.extractfile(member)
            if fh is not None:
                return fh.read().decode("utf-8")
    raise KeyError("PKG-INFO")
