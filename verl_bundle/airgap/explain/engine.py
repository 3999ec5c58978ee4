"""`explain LOG`: match a failed install's (or run's) log to known causes, each with a fix.

Runs on the air-gapped server (standard library only, Python 3.8+) when an install.sh phase
fails, and anywhere through `verl-bundle explain`. The knowledge lives in signatures.json (one
entry per cause: patterns, cause, fix, context rule, value extractors, a real sample line, read
by signatures.py); this module is the matcher. Logs can be tens of MB, so no regular expression
walks the whole text: each pattern's longest literal (its needle, derived from the pattern
itself) is located with `str.find`, and only the text around it is matched in full.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Mapping

from verl_bundle.airgap import render
from verl_bundle.airgap.checks import Verdict, of_explain
from verl_bundle.airgap.errors import UsageError
from verl_bundle.airgap.explain.signatures import SIGNATURES, Signature, values_near

TAIL_LINES = 20
TAIL_CHARS = 300  # each tail line is cut here, with a marker: a log may be one endless line
BINARY_SHARE = 0.3  # more than this share of the tail not text: the file is not a log
EVIDENCE_CHARS = 240
# A pattern is matched this far, in characters, around its needle: a multi-megabyte line (a
# progress display without newlines) is not scanned in full for every needle on it.
LINE_REACH = 4000
# After this many context checks a signature gives up, so a needle on very many lines that all
# fail the context cannot make a huge log slow.
MAX_CONTEXT_CHECKS = 1000

_SGR = re.compile(r"\x1b\[[0-9;]*m")
# A traceback echoes the source line that raised, message text included: not the error itself.
_SOURCE_ECHO = re.compile(r"\braise \w[\w.]*\(|\bwarnings\.warn\(")


@dataclass(frozen=True)
class Finding:
    """One known cause found in a log: what happened, why, what to do, and where it was seen."""

    id: str
    title: str
    cause: str
    fix: str
    evidence: str
    line: int


# -- matching -------------------------------------------------------------------------------


def _line_bounds(text: str, pos: int) -> tuple[int, int]:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    return start, len(text) if end == -1 else end


def _first_match(sig: Signature, text: str) -> tuple[int, int, re.Match[str]] | None:
    """The earliest line that matches `sig`: (line start, line end, the match)."""
    best: tuple[int, int, re.Match[str]] | None = None
    context_checks = 0
    for alt in sig.alternatives:
        needle = alt.needle
        limit = best[0] if best is not None else len(text)
        pos = text.find(needle, 0, limit + len(needle))
        while pos != -1 and pos < limit:
            start, end = _line_bounds(text, pos)
            m = alt.pattern.search(text, max(start, pos - LINE_REACH), min(end, pos + LINE_REACH))
            if m is not None and _SOURCE_ECHO.search(text, max(start, m.start() - 400), m.start()):
                m = None
            if m is not None and sig.context is not None:
                context_checks += 1
                if context_checks > MAX_CONTEXT_CHECKS:
                    return best
                if not sig.context(text, start, end):
                    m = None
            if m is not None:
                best = (start, end, m)
                break
            pos = text.find(needle, end, limit + len(needle))
    return best


def _shown(raw: str) -> str:
    """Log text as it may be shown: colours dropped, every other control a visible escape."""
    return render.printable(raw)


def _evidence(text: str, start: int, end: int, at: int) -> str:
    """The matched line, trimmed: the \\r-segment that matched, controls neutralised."""
    seg_start = max(start, text.rfind("\r", start, at) + 1)
    seg_end = text.find("\r", at, end)
    raw = text[seg_start : end if seg_end == -1 else seg_end]
    line = _SGR.sub("", raw).strip()
    if len(line) <= EVIDENCE_CHARS:
        return _shown(line)
    # A long line (an nvcc command, a pip warning with a repr inside): keep the matched part.
    first = max(0, at - seg_start - EVIDENCE_CHARS // 3)
    piece = _SGR.sub("", raw[first : first + EVIDENCE_CHARS]).strip()
    cut = first + EVIDENCE_CHARS < len(raw)
    return ("..." if first else "") + _shown(piece) + ("..." if cut else "")


def explain_text(text: str, known: Mapping[str, str] | None = None) -> list[Finding]:
    """Every known cause found in `text`, most specific first, each once (its first line).
    `known`: values the caller knows (e.g. "need": the bundle's installed size), used where
    the log itself does not say."""
    findings: list[Finding] = []
    for sig in SIGNATURES:
        hit = _first_match(sig, text)
        if hit is None:
            continue
        start, end, m = hit
        values = values_near(sig, text, start, known)
        findings.append(
            Finding(
                id=sig.id,
                title=sig.title,
                cause=sig.cause.format_map(values),
                fix=sig.fix.format_map(values),
                evidence=_evidence(text, start, end, m.start()),
                line=text.count("\n", 0, start) + 1,
            )
        )
    return findings


def tail(text: str, n: int = TAIL_LINES) -> list[str]:
    """The last `n` lines as a terminal shows them (last \\r-segment, controls neutralised)."""
    end = len(text)
    while end > 0 and text[end - 1] in "\r\n":
        end -= 1
    if end == 0:
        return []
    pos = end
    for _ in range(n):
        pos = text.rfind("\n", 0, pos)
        if pos == -1:
            break
    lines = text[pos + 1 : end].split("\n")
    return [_cut(line.rstrip("\r").rsplit("\r", 1)[-1]) for line in lines]


def _cut(line: str) -> str:
    if len(line) <= TAIL_CHARS:
        return _shown(line)
    return _shown(line[:TAIL_CHARS]) + f" ... ({len(line) - TAIL_CHARS} more characters)"


def not_text(text: str) -> float:
    """The share of the log's last 64 KiB that is not text (undecodable bytes, NULs, other
    controls than tab, newline and carriage return)."""
    sample = text[-65536:]
    if not sample:
        return 0.0
    bad = sum(1 for ch in sample if ch == "\ufffd" or (ch < " " and ch not in "\t\n\r\x1b"))
    return bad / len(sample)


# -- rendering and the command --------------------------------------------------------------


def render_text(findings: list[Finding], text: str) -> str:
    """For people: each finding's title, cause, fix and where it was seen; or the log's tail.
    Nothing from the log reaches the terminal as a control sequence."""
    if not findings:
        share = not_text(text)
        if share > BINARY_SHARE:
            return (
                f"explain: no known cause; this is not a text log ({share:.0%} of its end is not "
                "text): give the install log (<prefix>/.verl-bundle/install.log or --log FILE)"
            )
        last = tail(text)
        out = [f"explain: no known cause for this log; its last {len(last)} lines:"]
        out += ["    " + line for line in last]
        out += ["", verdict_of(findings).line]
        return render.printable("\n".join(out))
    noun = "cause" if len(findings) == 1 else "causes"
    out = [f"explain: {len(findings)} known {noun} in this log, most specific first"]
    for i, f in enumerate(findings, 1):
        out += [
            "",
            f"{i}. {f.title} [{f.id}]",
            f"   cause: {f.cause}",
            f"   fix: {f.fix}",
            f"   seen at line {f.line}: {f.evidence}",
        ]
    out += ["", verdict_of(findings).line]
    return render.printable("\n".join(out))


def verdict_of(findings: list[Finding]) -> Verdict:
    return of_explain(len(findings))


def result_json(findings: list[Finding], text: str) -> dict[str, Any]:
    """The result for machines: {"known", "findings": [{id, title, cause, fix, evidence,
    line}], "tail"}."""
    return {
        "known": bool(findings),
        "findings": [
            {
                "id": f.id,
                "title": f.title,
                "cause": f.cause,
                "fix": f.fix,
                "evidence": f.evidence,
                "line": f.line,
            }
            for f in findings
        ],
        "tail": tail(text),
    }


def render_json(findings: list[Finding], text: str) -> dict[str, Any]:
    """`result_json` in the versioned envelope, with explain's verdict; ok is whether a cause
    is known."""
    v = verdict_of(findings)
    return render.envelope("explain", v.ok, result_json(findings, text), v)


# What is not a log: an archive or a compressed file by its magic bytes (a bundle's tarball
# holds explain's own signature samples: read as a log, it "matched" 29 causes in 7 minutes).
HEAD = 4096  # the first block: all that is read of a file that is refused
_MAGIC = (
    (0, b"\x1f\x8b", "a gzip file"),
    (0, b"\x28\xb5\x2f\xfd", "a zstd file"),
    (0, b"PK\x03\x04", "a zip archive (or a wheel)"),
    (0, b"PK\x05\x06", "a zip archive"),
    (0, b"\xfd7zXZ\x00", "an xz file"),
    (0, b"BZh", "a bzip2 file"),
    (257, b"ustar", "a tar archive"),
)


def not_a_log(head: bytes) -> str | None:
    """What the first block of a file says it is when it is no log ("a tar archive"), or
    None for text."""
    for offset, magic, what in _MAGIC:
        if head[offset : offset + len(magic)] == magic:
            return what
    nuls = head.count(b"\0")
    # A NUL in a log is terminal junk now and then (kept: its lines are shown escaped); NULs
    # beside bytes that are no UTF-8, or many of them, are a binary file.
    if nuls and (nuls * 8 > len(head) or not _utf8(head)):
        return "a binary file (it holds NUL bytes)"
    return None


def _utf8(head: bytes) -> bool:
    """Whether `head` is UTF-8 (a character the block cuts short at its end allowed)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
    return True


def read_log(path: str) -> str:
    """The log's text (`-` is standard input); undecodable bytes become U+FFFD. An archive
    or binary file is refused from its first block, in one line (UsageError), unread."""
    if path == "-":
        head = sys.stdin.buffer.read(HEAD)
        rest = b"" if len(head) < HEAD or not_a_log(head) else sys.stdin.buffer.read()
    else:
        with open(path, "rb") as fh:
            head = fh.read(HEAD)
            rest = b"" if len(head) < HEAD or not_a_log(head) else fh.read()
    what = not_a_log(head)
    if what is not None:
        shown = "standard input" if path == "-" else path
        raise UsageError(
            f"explain: {shown} is {what}, not a log; give the failed command's output or log "
            "(install.sh writes PREFIX/.verl-bundle/install.log and phase-NAME.log there)"
        )
    return (head + rest).decode("utf-8", "replace")
