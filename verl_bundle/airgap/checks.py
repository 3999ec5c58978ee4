"""One finding type and one verdict for every check on the server side and the host.

Every surface that checks something (the doctor, post-install, readiness, assets, preflight,
the fleet report) returns `Check` values; the doctor's and preflight's checks are one registry
(`@check` marks a function with its id, `collect` lists a domain's marked functions); `verdict()` is the one function that turns them into
the last line every surface prints and the exit code it ends with. A verdict is never assembled
from rendered text: the installer reads post-install's checks back as `Check` values from its
JSON envelope and judges them here. Standard library only, Python 3.8+.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from types import ModuleType
from typing import Any, Callable, Iterable, Mapping, Sequence, TypeVar

from verl_bundle.airgap.errors import (
    EXIT_DAMAGED,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NOT_READY,
    EXIT_OK,
    EXIT_SERVER,
    EXIT_USAGE,
)

# ok; warn (does not block); fail; skip (not applicable here, said why); untested (could not be
# exercised on this machine, e.g. needs a GPU: never counted as ok).
STATUSES = ("ok", "warn", "fail", "skip", "untested")


@dataclass(frozen=True)
class Check:
    """One finding. A warn or fail carries a `fix` a user can apply offline; `subject` is what
    the finding is about (a module, a config, a node) when that is not the id itself."""

    id: str
    status: str
    summary: str
    detail: str = ""
    fix: str = ""
    subject: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Check:
        """A check read back from a JSON envelope; a field of the wrong type is a ValueError."""
        values = {}
        for name in ("id", "status", "summary", "detail", "fix", "subject"):
            value = data.get(name, "")
            if not isinstance(value, str):
                raise ValueError(f"check field {name!r} is not a string: {value!r:.60}")
            values[name] = value
        if values["status"] not in STATUSES:
            raise ValueError(f"check status {values['status']!r} is not one of {STATUSES}")
        return cls(**values)

    @property
    def about(self) -> str:
        return self.subject or self.id


def failures(checks: Iterable[Check]) -> list[Check]:
    return [c for c in checks if c.status == "fail"]


@dataclass(frozen=True)
class Verdict:
    """What a command concluded: the exit code, a state word for machines, and the one line
    every surface prints last."""

    code: int
    state: str
    line: str

    @property
    def ok(self) -> bool:
        return self.code == EXIT_OK

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "state": self.state, "line": self.line, "ok": self.ok}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Verdict:
        code, state, line = data.get("code"), data.get("state"), data.get("line")
        if not isinstance(code, int) or not isinstance(state, str) or not isinstance(line, str):
            raise ValueError("a verdict needs an integer code, a state and a line")
        return cls(code, state, line)


# The states, and the exit code each ends with.
STATES = {
    "ready": EXIT_OK,  # the deepest step ran (one PPO step, on a GPU); nothing left untested
    "ready-cpu": EXIT_OK,  # nothing that could be proven here failed; what was not, named
    "installed": EXIT_OK,  # installed and checked; the bundle has no trainer to prove
    "can-install": EXIT_OK,  # the doctor: this server can install the bundle
    "not-ready": EXIT_NOT_READY,  # installed as bundled, but the trainer cannot start
    "failed": EXIT_FAILED,  # not installed as bundled: a phase or an integrity check failed
    "server": EXIT_SERVER,  # the doctor: this server cannot install the bundle yet
    "damaged": EXIT_DAMAGED,
    "usage": EXIT_USAGE,
    "interrupted": EXIT_INTERRUPTED,
    "intact": EXIT_OK,  # verify: every file matches its lists
    "can-launch": EXIT_OK,  # preflight: nothing found that stops a launch on this node
    "cannot-launch": EXIT_FAILED,  # preflight: a check that stops the launch failed
    "explained": EXIT_OK,  # explain: known causes found in the log
    "unexplained": EXIT_FAILED,  # explain: no known cause
}
_STATE_OF_CODE = {
    EXIT_FAILED: "failed",
    EXIT_USAGE: "usage",
    EXIT_DAMAGED: "damaged",
    EXIT_SERVER: "server",
    EXIT_NOT_READY: "not-ready",
    EXIT_INTERRUPTED: "interrupted",
}


NEEDS_GPU = "needs a GPU: --require-gpu on a GPU server"


def _first(found: Sequence[Check]) -> str:
    c = found[0]
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    return f"{c.about}: {c.summary.splitlines()[0] if c.summary else c.status}{more}"


def verdict(
    *,
    server: Sequence[Check] = (),
    installed: Sequence[Check] | None = None,
    readiness: Sequence[Check] | None = None,
    purpose: str = "",
    limit: str = "",
    bundle: bool = True,
    existing: str = "",
) -> Verdict:
    """The one verdict. `server`: the doctor's checks (before an install); `installed`: what
    post-install found about the installed files and versions (None: nothing installed yet);
    `readiness`: whether the trainer can start (the GPU checks alone for a bundle without one);
    `purpose`: what readiness proves ("PPO with FSDP and vLLM rollout"; "" when the bundle has
    no trainer); `limit`: the profile's declared
    known limit, said beside a not-ready verdict. `bundle` False: the doctor checked the host
    on its own, without a bundle's needs. `existing`: the doctor was pointed at an environment
    already installed there, whose readiness it does not check: the line says so."""
    broken = failures(server)
    host = "" if bundle else " (checked without a bundle: --bundle DIR for a bundle's needs)"
    if broken:
        what = "not ready to install" if bundle else "this host has failures"
        return Verdict(EXIT_SERVER, "server", f"{what}: {_first(broken)}{host}")
    if installed is None and readiness is None:
        other = (
            f" (this checks whether this server can install the bundle, not whether the "
            f"environment in {existing} can train: readiness --deep with its python says that)"
            if existing
            else ""
        )
        what = "ready to install" if bundle else "no failures"
        return Verdict(EXIT_OK, "can-install", what + host + other)
    broken = failures(installed or ())
    if broken:
        return Verdict(EXIT_FAILED, "failed", f"not installed as bundled: {_first(broken)}")
    broken = failures(readiness or ())
    if broken:
        known = (
            limit[len("not ready to train:") :].strip()
            if limit.startswith("not ready to train:")
            else limit
        )
        why = f" (the profile's known limit: {known})" if known else ""
        return Verdict(EXIT_NOT_READY, "not-ready", f"not ready to train: {_first(broken)}{why}")
    if not purpose:
        return Verdict(
            EXIT_OK,
            "installed",
            "installed and checked; this bundle has no verl, so there is no trainer to prove",
        )
    # Untested, grouped by why: a check's detail says it (e.g. "left out by --quick"); without
    # one, it could not be exercised on this machine because it needs a GPU.
    why_untested: dict[str, list[str]] = {}
    for c in readiness or ():
        if c.status == "untested":
            why_untested.setdefault(c.detail or NEEDS_GPU, []).append(c.about)
    what = purpose or "the bundle's trainer"
    if why_untested:
        said = "; ".join(
            f"{', '.join(dict.fromkeys(names))} ({why})" for why, names in why_untested.items()
        )
        return Verdict(
            EXIT_OK,
            "ready-cpu",
            f"ready to train on the CPU side ({what}); not proven here: {said}",
        )
    return Verdict(EXIT_OK, "ready", f"ready to train: {what}")


def of_error(code: int, line: str) -> Verdict:
    """The verdict of a command that stopped with an error (`line`: what the last line says,
    e.g. "not installed: the bundle is damaged (above)"): never ready."""
    return Verdict(code, _STATE_OF_CODE.get(code, "failed"), line)


def of_verify(problems: Sequence[str], line: str) -> Verdict:
    """verify's verdict: intact, or damaged (exit 3) with how many problems were found."""
    if problems:
        return Verdict(
            EXIT_DAMAGED, "damaged", f"damaged: {len(problems)} problem(s); copy the bundle again"
        )
    return Verdict(EXIT_OK, "intact", line)


def of_preflight(checks: Sequence[Check]) -> Verdict:
    """preflight's verdict: the first failed check stops the launch (exit 1)."""
    broken = failures(checks)
    if broken:
        return Verdict(
            EXIT_FAILED, "cannot-launch", f"preflight: NOT ready to launch: {_first(broken)}"
        )
    return Verdict(EXIT_OK, "can-launch", "preflight: ready to launch")


def of_explain(found: int) -> Verdict:
    """explain's verdict: known causes (exit 0), or none (exit 1: the log's tail is shown)."""
    if found:
        noun = "cause" if found == 1 else "causes"
        return Verdict(EXIT_OK, "explained", f"explain: {found} known {noun}, most specific first")
    return Verdict(EXIT_FAILED, "unexplained", "explain: no known cause in this log")


# -- the one registry: one function per check, marked with its id --------------------------------

F = TypeVar("F", bound=Callable[..., Check])
_MARK = "_registered_check"


@dataclass(frozen=True)
class Registered:
    """A marked check function; `generic` checks also run with no bundle (the doctor's host
    checked on its own)."""

    id: str
    fn: Callable[..., Check]
    generic: bool = False


def check(check_id: str, *, generic: bool = False) -> Callable[[F], F]:
    """Mark a check function with its id. It only marks: what runs is the explicit list of
    modules given to `collect` (the doctor's catalog, preflight's own module), so no import side
    effect decides it."""

    def mark(fn: F) -> F:
        setattr(fn, _MARK, (check_id, generic))
        return fn

    return mark


def collect(domains: Sequence[ModuleType]) -> tuple[Registered, ...]:
    """Every marked check of `domains`, in their order, each module's in definition order; an
    id used twice is a ValueError."""
    out: list[Registered] = []
    for module in domains:
        for value in vars(module).values():
            mark = getattr(value, _MARK, None)
            if mark is None or getattr(value, "__module__", None) != module.__name__:
                continue
            if any(r.id == mark[0] for r in out):
                raise ValueError(f"check {mark[0]!r} is registered twice")
            out.append(Registered(mark[0], value, mark[1]))
    return tuple(out)
