"""The nodes a fleet report expects, from the way clusters write them: a comma list, Slurm's
compressed form ($SLURM_JOB_NODELIST: gpu[01-04,07], rack[1-2]-n[1-2]) expanded here without
scontrol, or a file of such names (one or more a line, # comments)."""

from __future__ import annotations

import re
from pathlib import Path

from verl_bundle.errors import UsageError

MAX_NAMES = 100_000
MAX_FILE = 1 << 20
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,252}")
_LITERAL = re.compile(r"[A-Za-z0-9._:-]*")
_RANGE = re.compile(r"([0-9]{1,9})(?:-([0-9]{1,9}))?")


class HostlistError(UsageError):
    """An expected-nodes value that cannot be read: one line."""


def _top_level(text: str) -> list[str]:
    """`text` split at the commas outside brackets."""
    items, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise HostlistError(f"{text[:80]!r}: brackets inside brackets")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise HostlistError(f"{text[:80]!r}: a ']' without its '['")
        elif ch == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    if depth:
        raise HostlistError(f"{text[:80]!r}: a '[' without its ']'")
    items.append(text[start:])
    return [item.strip() for item in items if item.strip()]


def _group(body: str, item: str) -> list[str]:
    """The numbers of one bracket group ('01-04,07'), zero-padded to the width of each range's
    first number as Slurm writes them."""
    out: list[str] = []
    for part in body.split(","):
        m = _RANGE.fullmatch(part.strip())
        if not m:
            raise HostlistError(
                f"{item[:80]!r}: [{body[:40]}] is not numbers and ranges (01-04,07)"
            )
        lo, hi = m.group(1), m.group(2) or m.group(1)
        if int(hi) < int(lo):
            raise HostlistError(f"{item[:80]!r}: the range {lo}-{hi} runs backwards")
        if int(hi) - int(lo) + len(out) >= MAX_NAMES:
            raise HostlistError(f"{item[:80]!r}: more than {MAX_NAMES} names")
        out.extend(f"{n:0{len(lo)}d}" for n in range(int(lo), int(hi) + 1))
    return out


def _item(item: str) -> list[str]:
    names = [""]
    pos = 0
    for m in re.finditer(r"\[([^\]]*)\]", item):
        names = [n + item[pos : m.start()] for n in names]
        numbers = _group(m.group(1), item)
        if len(names) * len(numbers) > MAX_NAMES:
            raise HostlistError(f"{item[:80]!r}: more than {MAX_NAMES} names")
        names = [n + x for n in names for x in numbers]
        pos = m.end()
    names = [n + item[pos:] for n in names]
    for name in names:
        if not NODE_NAME.fullmatch(name):
            raise HostlistError(
                f"{name[:80]!r} is not a node name (letters, digits, . _ : -, and [ranges])"
            )
    return names


def expand(text: str) -> list[str]:
    """Every name in a hostlist (a comma list, with Slurm's [ranges]), in order, once each."""
    names: list[str] = []
    for item in _top_level(text):
        if not _LITERAL.fullmatch(re.sub(r"\[[^\]]*\]", "", item)):
            raise HostlistError(
                f"{item[:80]!r} is not a node name (letters, digits, . _ : -, and [ranges])"
            )
        names.extend(_item(item))
        if len(names) > MAX_NAMES:
            raise HostlistError(f"more than {MAX_NAMES} expected nodes")
    return list(dict.fromkeys(names))


def read_expect(value: str) -> list[str]:
    """--expect: a file of hostlists (when `value` names one), else a hostlist itself."""
    path = Path(value)
    if "/" in value or path.is_file():
        try:
            with path.open("rb") as fh:
                data = fh.read(MAX_FILE + 1)
        except OSError as exc:
            raise HostlistError(f"--expect {value}: cannot read it ({exc.strerror})") from None
        if len(data) > MAX_FILE:
            raise HostlistError(f"--expect {value}: over 1 MiB, not a list of node names")
        lines = data.decode("utf-8", errors="replace").splitlines()
        words = [w for ln in lines for w in ln.split("#", 1)[0].split()]
        names = expand(",".join(words))
    elif value.strip().isdigit():
        raise HostlistError(
            f"--expect {value.strip()}: a count, not node names; give the names (n[1-2], "
            "gpu01,gpu02) or a file of them: names are what show a node that never reported"
        )
    else:
        names = expand(value)
    if not names:
        raise HostlistError(f"--expect {value[:80]!r}: no node names in it")
    return names
