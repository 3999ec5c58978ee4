"""The server side is one program: one entry and parser, one exception root, one Check type, an
explicit check catalog, no import cycle, and no fix text that names an option or phase the
command it names would refuse."""

from __future__ import annotations

import ast
import re
import shlex
import shutil
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT
from support.airgap import STANDALONE

from verl_bundle.airgap import checks, cli
from verl_bundle.airgap.checks import STATES, Check, Verdict, verdict
from verl_bundle.airgap.doctor import catalog, registry
from verl_bundle.airgap.errors import EXIT_CODES, ServerError

AIRGAP = ROOT / "verl_bundle" / "airgap"


def modules() -> dict[str, ast.Module]:
    return {
        p.relative_to(AIRGAP).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(AIRGAP.rglob("*.py"))
    }


def test_one_main_and_one_parser() -> None:
    for rel, tree in modules().items():
        mains = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "main"]
        parsers = [
            n
            for n in ast.walk(tree)
            if (isinstance(n, ast.Attribute) and n.attr == "ArgumentParser")
            or (isinstance(n, ast.Name) and n.id == "ArgumentParser")
        ]
        if rel == "cli.py":
            assert mains == ["main"] and len(parsers) == 1, rel
        elif rel not in STANDALONE:
            assert not mains and not parsers, f"{rel} has its own entry or parser"


def test_every_exception_has_the_one_root() -> None:
    for rel, tree in modules().items():
        for node in ast.walk(tree):
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {b.id for b in node.bases if isinstance(b, ast.Name)}
            if not bases & {"Exception", "ValueError", "RuntimeError", "OSError"}:
                continue
            if (rel, node.name) == ("errors.py", "ServerError") or rel == "verify/served.py":
                continue  # runs before lib/ exists: cannot import errors.py (its docstring)
            if rel.startswith("inside/"):
                continue  # run by the target's python, importing nothing of the project
            assert bases - {"Exception", "ValueError", "RuntimeError", "OSError"}, (
                f"{rel}: {node.name} does not derive from ServerError"
            )
    import verl_bundle.airgap.contract.manifest as mf
    import verl_bundle.airgap.launch.verlconfig as vc

    assert issubclass(mf.ManifestError, ServerError) and mf.ManifestError("x").code == 3
    assert issubclass(vc.ConfigError, ServerError) and vc.ConfigError("x").code == 2


def test_one_check_type() -> None:
    """No module of the server side defines a finding type of its own."""
    for rel, tree in modules().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name in ("Check", "Result", "Finding"):
                assert (rel, node.name) in (
                    ("checks.py", "Check"),
                    ("explain/engine.py", "Finding"),
                )


def _typing_only(tree: ast.Module) -> set[int]:
    """ids of the nodes under `if TYPE_CHECKING:` (names for the type checker, never imported
    at run time)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            out |= {id(n) for part in node.body for n in ast.walk(part)}
    return out


def _imports(rel: str, tree: ast.Module) -> set[str]:
    """The airgap modules `rel` imports at run time, at any depth (lazy imports in functions
    included; `if TYPE_CHECKING:` blocks are not imports)."""
    pkg = "verl_bundle.airgap"
    out: set[str] = set()
    skip = _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(pkg):
            base = node.module[len(pkg) + 1 :]
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                out.add(sub if (AIRGAP / (sub.replace(".", "/") + ".py")).exists() else base)
        elif isinstance(node, ast.Import):
            out |= {a.name[len(pkg) + 1 :] for a in node.names if a.name.startswith(pkg + ".")}
    return {m for m in out if m}


def test_the_import_graph_has_no_cycle() -> None:
    """Module-level and lazy imports alike: a cycle hidden in a function is still a cycle."""
    graph: dict[str, set[str]] = {}
    for rel, tree in modules().items():
        name = rel[: -len(".py")].replace("/", ".")
        name = name[: -len(".__init__")] if name.endswith(".__init__") else name
        graph[name] = _imports(rel, tree) - {name}
    # A package's __init__ is imported with each of its modules: an edge to the package is
    # an edge to its __init__'s imports, which is what the graph already holds.
    seen: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        seen[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt == node or nxt not in graph:
                continue
            if node.startswith(nxt + "."):
                continue  # a module importing its own package's __init__
            assert seen.get(nxt) != 1, "import cycle: " + " -> ".join([*path, nxt])
            if nxt not in seen:
                visit(nxt)
        path.pop()
        seen[node] = 2

    for node in sorted(graph):
        if node not in seen:
            visit(node)


def test_the_layout_reads_as_the_pipeline() -> None:
    packages = sorted(p.name for p in AIRGAP.iterdir() if (p / "__init__.py").is_file())
    assert packages == [
        "assets",
        "contract",
        "doctor",
        "explain",
        "inside",
        "install",
        "launch",
        "postinstall",
        "trust",
        "verify",
    ]


def test_every_marked_doctor_check_is_in_the_catalog() -> None:
    """`@check` only marks; the catalog's explicit list decides what runs. A check in a module
    the catalog forgets would never run: none is."""
    marked = set()
    for path in (AIRGAP / "doctor").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef):
                for d in node.decorator_list:
                    if isinstance(d, ast.Call) and getattr(d.func, "id", "") == "check":
                        first = d.args[0]
                        assert isinstance(first, ast.Constant)
                        marked.add(first.value)
    assert marked and marked == {r.id for r in catalog.registered()}


def test_a_check_id_used_twice_is_refused() -> None:
    import types

    module = types.ModuleType("twice")

    def a(*_: object) -> Check:
        return registry.ok("a")

    def b(*_: object) -> Check:
        return registry.ok("b")

    a.__module__ = b.__module__ = "twice"
    module.a = checks.check("same")(a)  # type: ignore[attr-defined]
    module.b = checks.check("same")(b)  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="registered twice"):
        checks.collect([module])


def test_the_doctor_and_preflight_mark_their_checks_in_the_one_registry() -> None:
    """One registry: preflight's checks are collected like the doctor's, by the one `@check`
    of airgap/checks.py, with no list of its own."""
    from verl_bundle.airgap.doctor import catalog
    from verl_bundle.airgap.launch import preflight

    doctor_ids = [r.id for r in catalog.registered()]
    preflight_ids = [r.id for r in preflight.registered()]
    assert "devices" in preflight_ids and "os" in doctor_ids
    assert len(set(preflight_ids)) == len(preflight_ids)
    assert not hasattr(preflight, "CHECKS")
    assert checks.collect((preflight,)) == preflight.registered()
    assert {r.fn.__module__ for r in preflight.registered()} == {preflight.__name__}


# -- the verdict -----------------------------------------------------------------------------


def c(status: str, id_: str = "x", subject: str = "") -> Check:
    return Check(id_, status, f"{id_} is {status}", subject=subject)


@pytest.mark.parametrize(
    ("kwargs", "code", "state", "line"),
    [
        ({"server": [c("ok")]}, 0, "can-install", "ready to install"),
        ({"server": [c("fail", "gcc")]}, 4, "server", "not ready to install: gcc: gcc is fail"),
        (
            {"installed": [c("fail", "versions")], "readiness": [c("ok")]},
            1,
            "failed",
            "not installed as bundled: versions",
        ),
        (
            {
                "installed": [c("ok")],
                "readiness": [c("fail", "import:flash_attn", "flash_attn")],
                "purpose": "PPO",
            },
            5,
            "not-ready",
            "not ready to train: flash_attn",
        ),
        (
            {
                "installed": [c("ok")],
                "readiness": [c("untested", "import:r", "r")],
                "purpose": "PPO",
            },
            0,
            "ready-cpu",
            "ready to train on the CPU side (PPO); not proven here: r",
        ),
        (
            {"installed": [c("ok")], "readiness": [c("ok")], "purpose": "PPO"},
            0,
            "ready",
            "ready to train: PPO",
        ),
        (
            {"installed": [c("ok")], "readiness": [c("skip", "gpu")]},
            0,
            "installed",
            "installed and checked",
        ),
        (
            {"installed": [c("ok")], "readiness": [c("fail", "gpu")]},
            5,
            "not-ready",
            "not ready to train: gpu",
        ),
    ],
)
def test_one_verdict_for_every_state(
    kwargs: dict[str, object], code: int, state: str, line: str
) -> None:
    v = verdict(**kwargs)  # type: ignore[arg-type]
    assert (v.code, v.state) == (code, state) and v.line.startswith(line)
    assert STATES[v.state] == v.code
    assert Verdict.from_dict(v.to_dict()) == v
    assert v.ok == (code == 0)


def test_ready_is_never_said_with_a_failure_or_an_untested_module() -> None:
    v = verdict(installed=[], readiness=[c("ok"), c("untested", "m", "m")], purpose="P")
    assert not v.line.startswith("ready to train:")
    v = verdict(installed=[], readiness=[c("ok"), c("fail", "m", "m")], purpose="P")
    assert "ready to train" not in v.line.replace("not ready to train", "")


def test_a_malformed_check_from_an_envelope_is_refused() -> None:
    with pytest.raises(ValueError, match="status"):
        Check.from_dict({"id": "x", "status": "fine", "summary": ""})
    with pytest.raises(ValueError, match="summary"):
        Check.from_dict({"id": "x", "status": "ok", "summary": ["not", "text"]})


def test_the_exit_table_is_the_one_every_help_prints() -> None:
    from verl_bundle.airgap.install.options import usage

    help_text = cli.parser().format_help()
    for code, meaning in EXIT_CODES.items():
        assert f"{code:<3} {meaning}" in help_text
        assert f"{code:<3} {meaning}" in usage(None)
    readme = (ROOT / "README.md").read_text()
    for code in EXIT_CODES:
        assert re.search(rf"^\|\s*{code}\s*\|", readme, re.M), f"README's exit table lacks {code}"


def test_one_exit_table_and_every_stop_has_its_words() -> None:
    """The codes the standalone fetcher uses are the table's, every code has the words an
    install that stopped with it ends with, and the fleet reads the same table (no copy)."""
    import ast as _ast

    from verl_bundle.airgap import errors

    tree = _ast.parse((AIRGAP / "verify" / "served.py").read_text())
    found: dict[str, int] = {}
    for node in tree.body:
        if isinstance(node, _ast.Assign) and isinstance(node.targets[0], _ast.Tuple):
            names = [t.id for t in node.targets[0].elts if isinstance(t, _ast.Name)]
            if all(n.startswith("EXIT_") for n in names) and isinstance(node.value, _ast.Tuple):
                values = [v.value for v in node.value.elts if isinstance(v, _ast.Constant)]
                found.update(
                    (n, v) for n, v in zip(names, values, strict=True) if isinstance(v, int)
                )
    assert found, "served.py's exit codes"
    for name, value in found.items():
        assert getattr(errors, name) == value, name
    for code in EXIT_CODES:
        if code:
            assert errors.stopped(code).startswith(("not installed", "nothing", "installed")), code
    assert "exit 99" in errors.meaning(99)
    for path in (ROOT / "verl_bundle").rglob("*.py"):
        text = path.read_text()
        assert "INSTALL_EXIT" not in text and "_STOPPED = {" not in text, path


# -- every fix text names options the command it names accepts --------------------------------

_COMMAND = re.compile(
    r"(\./install\.sh|install\.sh|\./doctor|verl-bundle-verify|verl-bundle [a-z-]+(?: [a-z-]+)?|"
    r"python3? -m verl_bundle\.airgap [a-z-]+)"
)
# Where the words that go with a command end: the end of its clause.
_CLAUSE_END = re.compile(r"[;`)\n]|\. |, or |, then | and then ")
_OPTION = re.compile(r"(?<![\w-])(--[a-z][a-z0-9-]*)")


def _literals() -> list[tuple[str, str]]:
    """Every string the server side can show: its literals (f-strings' literal parts joined)
    and the fix/cause texts of its JSON tables."""
    import json

    out: list[tuple[str, str]] = []
    for rel, tree in modules().items():
        docs = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and n.body
            and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if id(node) in docs:
                continue  # docstrings speak to developers, not users
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.append((rel, node.value))
            elif isinstance(node, ast.JoinedStr):
                out.append(
                    (
                        rel,
                        "".join(
                            str(v.value) if isinstance(v, ast.Constant) else "X"
                            for v in node.values
                        ),
                    )
                )
    for table in ("postinstall/readiness.json", "explain/signatures.json"):
        doc = json.loads((AIRGAP / table).read_text())

        def walk(x: object, where: str) -> None:
            if isinstance(x, dict):
                for k, v in x.items():
                    if k in ("fix", "cause") and isinstance(v, str):
                        out.append((where, v))
                    walk(v, where)
            elif isinstance(x, list):
                for v in x:
                    walk(v, where)

        walk(doc, table)
    return out


def _server_options() -> dict[str, set[str]]:
    """command -> the options the one parser accepts for it."""
    top = cli.parser()
    out: dict[str, set[str]] = {}
    sub = next(a for a in top._actions if a.dest == "command")
    for name, p in sub.choices.items():  # type: ignore[union-attr]
        out[name] = {o for a in p._actions for o in a.option_strings}
    from verl_bundle.airgap.trust import verifier

    out["verl-bundle-verify"] = {
        o
        for p in (verifier.parser(), verifier.setup_parser())
        for a in p._actions
        for o in a.option_strings
    }
    return out


def _host_options() -> dict[str, set[str]]:
    import typer

    from verl_bundle.cli.main import app

    group = typer.main.get_command(app)
    out: dict[str, set[str]] = {}

    def walk(cmd: Any, prefix: str) -> None:
        out[prefix] = {o for p in cmd.params for o in getattr(p, "opts", [])} | {"--help", "--json"}
        for name, child in getattr(cmd, "commands", {}).items():
            walk(child, f"{prefix} {name}".strip())

    walk(group, "")
    return out


def test_every_option_a_fix_names_is_accepted_by_the_command_it_names() -> None:
    server, host = _server_options(), _host_options()
    every = set().union(*server.values(), *host.values())
    checked = 0
    for rel, text in _literals():
        for m in _COMMAND.finditer(text):
            head = m.group(1)
            end = _CLAUSE_END.search(text, m.end())
            rest = text[m.end() : end.start() if end else len(text)]
            if head in ("./install.sh", "install.sh"):
                known = server["install"]
            elif head == "./doctor":
                known = server["doctor"]
            elif head == "verl-bundle-verify":
                known = server["verl-bundle-verify"]
            elif head.startswith("python"):
                known = server.get(head.split()[-1], set())
            else:
                words = head.split()[1:]
                name = " ".join(words)
                known = host.get(name) or host.get(words[0], set())
            for option in _OPTION.findall(rest):
                checked += 1
                assert option in known, f"{rel}: {head} does not accept {option}: {text[:160]!r}"
        if text.lstrip().startswith("-") or " " not in text.strip():
            continue  # an argv fragment for another tool, not a sentence for people
        for option in _OPTION.findall(text):
            if option.startswith(("--no-", "--with-")) and option not in every:
                continue  # uv's, pip's and venv's own options, named as such
            assert option in every or option in TOOLS_OPTIONS, (
                f"{rel}: no command has {option}: {text[:160]!r}"
            )
    assert checked >= 5  # the walk finds the fixes that name a command and its options


# Options of other tools that fixes name (uv, pip, nvcc, torchrun, ray, python -m venv, ...).
TOOLS_OPTIONS = {
    "--keyring",  # gpgv's, in the gate's command (verify/signature.py)
    "--nproc",  # torchrun's --nproc_per_node (the pattern stops at the underscore)
    "--rdzv",  # torchrun's --rdzv_endpoint
    "--master",  # torchrun's --master_addr, --master_port
    "--node",  # torchrun's --node_rank
    "--version",
    "--no-deps",
    "--offline",
    "--require-hashes",
    "--no-index",
    "--find-links",
    "--python",
    "--nproc_per_node",
    "--nnodes",
    "--num-cpus",
    "--num-gpus",
    "--address",
    "--head",
    "--port",
    "--block",
    "--temp-dir",
    "--list",
    "--query-gpu",
    "--format",
    "--compile-bytecode",
    "--hash",
    "--system-site-packages",
    "--upgrade",
    "--user",
    "--break-system-packages",
    "--no-build-isolation",
    "--extra-index-url",
    "--index-url",
    "--target",
    "--dryrun",
    "--list-gpu-arch",
    "--list-elf",
    "--gpu-architecture",
    "--help",
    "--json",
    "--link-mode",
    "--without-pip",
    "--copies",
    "--dry-run",
    "--allow-run-as-root",
    "--net",
    "--map-root-user",
    "--force-reinstall",
    "--gpus",
    "--propagate",
}


def test_every_phase_a_doctor_fix_names_is_a_phase_of_the_bundle() -> None:
    """`verl-bundle doctor --profile P` plans each profile's real phases: a fix that says
    --skip-phase X names a phase install.sh accepts."""
    from verl_bundle.airgap import doctor
    from verl_bundle.bundle.plan import manifest_for_profile
    from verl_bundle.profile.catalog import builtin_profiles

    for profile in builtin_profiles():
        m = manifest_for_profile(profile, profile.target())
        report = doctor.run_doctor(m)
        for check in report.checks:
            for phase in re.findall(r"--skip-phase ([\w.-]+)", f"{check.fix} {check.detail}"):
                assert phase in {p.name for p in profile.phases}, (profile.name, check.fix)


def test_a_fix_command_line_parses(tmp_path: Path) -> None:
    """The install.sh lines fixes give are whole command lines the parser takes."""
    p = cli.parser()
    for line in ("--prefix /p --skip-phase flash-attn --yes", "--require-gpu --json"):
        args = p.parse_args(["install", str(tmp_path), *shlex.split(line)])
        assert args.bundle == str(tmp_path)


# -- the server program runs isolated, from the bundle's lib/ only ------------------------------


def test_the_isolated_form_runs_the_bundles_lib_not_the_current_directory(tmp_path: Path) -> None:
    """`python3 -I -B NAME/lib/verl_bundle/airgap COMMAND` (what the docs and printed commands
    give) imports the lib/ it names, never a verl_bundle/ in the current directory, as
    `PYTHONPATH=NAME/lib python3 -m verl_bundle.airgap` did; on the oldest Python it supports."""
    import subprocess
    import sys

    from support.airgap import find_python

    lib = tmp_path / "NAME" / "lib"
    airgap = lib / "verl_bundle" / "airgap"
    shutil.copytree(AIRGAP, airgap, ignore=shutil.ignore_patterns("__pycache__"))
    (lib / "verl_bundle" / "__init__.py").write_text("")
    cwd = tmp_path / "work"
    (cwd / "verl_bundle").mkdir(parents=True)
    (cwd / "verl_bundle" / "__init__.py").write_text("raise SystemExit('the impostor ran')\n")
    pythons = [sys.executable] + [p for p in [find_python("3.8")] if p]
    for python in pythons:
        proc = subprocess.run(
            [python, "-I", "-B", str(airgap), "max-jobs"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0 and proc.stdout.strip().isdigit(), (python, proc.stderr)
    assert not list(lib.rglob("__pycache__")), "bytecode written into the bundle"


def test_no_printed_command_or_doc_runs_the_server_program_from_pythonpath() -> None:
    """The documented and printed server commands use the isolated form: `PYTHONPATH=... python
    -m verl_bundle.airgap` puts the current directory first on the path."""
    loose = re.compile(r"PYTHONPATH=\S*\s+\S*python[0-9.]*\s+-m\s+verl_bundle\.airgap")
    files = [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", *(ROOT / "templates").iterdir()]
    files += (ROOT / "verl_bundle").rglob("*.py")
    found = sorted(str(p.relative_to(ROOT)) for p in files if loose.search(p.read_text()))
    assert not found, found


def test_no_module_of_the_server_program_shadows_the_standard_library() -> None:
    """Run as a directory, airgap/ is first on the path while Python starts the program:
    a module there named as a standard one (`inspect.py`, `types.py`) would be imported in
    its place."""
    import sys

    names = {p.stem for p in AIRGAP.glob("*.py")} | {
        p.name for p in AIRGAP.iterdir() if (p / "__init__.py").is_file()
    }
    assert not names & set(sys.stdlib_module_names)


def test_skip_phases_is_checked_in_one_place_with_one_message() -> None:
    """--skip-phase of every surface (install.sh, doctor, postinstall, readiness, rehearse, the
    cluster scripts) goes through airgap/contract/skip_phases.py: one message naming the name
    and the bundle's phases, exit 2; and no other module words it."""
    from verl_bundle.airgap.contract.skip_phases import skip_phases

    phases = ("torch", "wheels", "flash-attn", "verl")
    assert skip_phases(["flash-attn", "verl", "flash-attn"], phases) == ("flash-attn", "verl")
    with pytest.raises(ServerError) as unknown:
        skip_phases(["nope"], phases)
    assert unknown.value.code == 2
    assert str(unknown.value) == (
        "--skip-phase nope: the bundle has no such phase; its phases are torch, wheels, "
        "flash-attn, verl"
    )
    with pytest.raises(ServerError, match=r"--skip-phase '\$\(touch x\)': not a phase name"):
        skip_phases(["$(touch x)"], None)  # no bundle at hand: the shape alone
    assert skip_phases(["flash-attn"], None) == ("flash-attn",)
    worded = [
        str(p.relative_to(ROOT))
        for p in (ROOT / "verl_bundle").rglob("*.py")
        if "has no such phase" in p.read_text() or "not a phase name" in p.read_text()
    ]
    assert worded == ["verl_bundle/airgap/contract/skip_phases.py"]
