"""The host side reads as the pipeline: one package per stage, each importing only the stages
before it and the foundation under all of them; no import cycle (lazy imports in functions
count); no private name imported from another module; a package's __init__ holds its docstring
only, so importing one module never loads its siblings. (The server program's own rules are
tests/test_server_program.py's.)"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "verl_bundle"
# The foundation every stage may use, then the stages in pipeline order: a module may import a
# module of its own layer or of an earlier one, never of a later one. sources/ comes before
# resolve/ (a fork's wheel is built before the stack is resolved around it) and compile/ before
# fetch/ (the fetch stage calls the host compile once per source build).
FOUNDATION = {
    "__init__",
    "errors",
    "progress",
    "credentials",
    "interpreter",
    "leftovers",
    "resources",
    "uvcmd",
    "wheel",
    "net",
}
STAGES = [
    "profile",
    "sources",
    "resolve",
    "compile",
    "fetch",
    "bundle",
    "assets",
    "rehearse",
    "cluster",
    "pipeline",
    "cli",
    "__main__",
]


def _host_modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(ROOT).with_suffix("").as_posix().replace("/", ".")
        if rel.startswith("verl_bundle.airgap"):
            continue
        out[rel.removesuffix(".__init__")] = path
    return out


def _typing_only(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            out |= {id(n) for part in node.body for n in ast.walk(part)}
    return out


def _imports(tree: ast.Module, known: dict[str, Path]) -> set[str]:
    """The host modules a module imports at run time (module level and in functions)."""
    out: set[str] = set()
    skip = _typing_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module in known:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                out.add(sub if sub in known else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name in known}
    return out


def _graph() -> dict[str, set[str]]:
    known = _host_modules()
    return {
        name: _imports(ast.parse(path.read_text(), str(path)), known) - {name}
        for name, path in known.items()
    }


def _layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] in FOUNDATION:
        return -1
    return STAGES.index(parts[1])


def test_every_top_level_name_has_a_layer() -> None:
    tops = {p.stem if p.is_file() else p.name for p in PACKAGE.iterdir()}
    tops = {t for t in tops if not t.startswith((".", "__pycache__")) and t != "airgap"}
    tops -= {"profiles", "templates"}  # the data a wheel carries (pyproject's force-include)
    assert tops <= FOUNDATION | set(STAGES), tops - FOUNDATION - set(STAGES)


def test_no_stage_imports_a_later_one() -> None:
    wrong = [
        f"{m} imports {t}"
        for m, targets in sorted(_graph().items())
        for t in sorted(targets)
        if _layer(t) > _layer(m)
    ]
    assert not wrong, wrong


def test_the_host_import_graph_has_no_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if node.startswith(nxt + "."):
                continue  # a module and its own package's (docstring-only) __init__
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join([*path, nxt])
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)


def test_no_private_name_is_imported_from_another_module() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("verl_bundle"):
                found += [
                    f"{path.relative_to(ROOT)}: {node.module}.{a.name}"
                    for a in node.names
                    if a.name.startswith("_") and a.name != "__version__"
                ]
    assert not found, found


def test_a_host_package_init_holds_its_docstring_only() -> None:
    for init in sorted(PACKAGE.rglob("__init__.py")):
        rel = init.relative_to(PACKAGE).as_posix()
        if rel.startswith("airgap/") or rel == "__init__.py":
            continue  # the server program's packages are test_server_program's
        body = ast.parse(init.read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), f"{rel} holds code"


# -- the crossing in one home ------------------------------------------------------------------
# Each job of the crossing has one implementation, in the server program (standard library,
# Python 3.8+), which the host calls and every bundle carries: signing and its checks in
# airgap/verify/signature.py, volumes (written and checked) in airgap/verify/volumes.py, what a
# delta leaves to its base and how the server finds it in airgap/verify/delta.py; the licence
# grouping (host only: the SBOM's) in bundle/crossing/sbom.py.
HOMES = {
    "sign": "airgap/verify/signature.py",
    "volumes": "airgap/verify/volumes.py",
    "delta": "airgap/verify/delta.py",
    "licences": "bundle/crossing/sbom.py",
}
_VOLUME_PATTERN = re.compile(r"\\d\{3\}|\[0-9\]\{3\}")


def _sources() -> dict[str, ast.Module]:
    return {
        p.relative_to(PACKAGE).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(PACKAGE.rglob("*.py"))
    }


def _code_strings(tree: ast.Module) -> list[str]:
    """The string constants of a module that are code (docstrings left out), and the format
    specs of its f-strings."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            out.append(node.value)
        elif isinstance(node, ast.FormattedValue) and isinstance(node.format_spec, ast.JoinedStr):
            spec = [v.value for v in node.format_spec.values if isinstance(v, ast.Constant)]
            out += [f"format:{v}" for v in spec if isinstance(v, str)]
    return out


def _where(found: Callable[[ast.Module], bool]) -> list[str]:
    """The modules of which `found` holds."""
    return [rel for rel, tree in _sources().items() if found(tree)]


def test_only_the_signature_module_runs_the_signing_tools_or_names_a_signature_file() -> None:
    tools = {"ssh-keygen", "gpg", "gpgv", ".sig", ".asc"}
    assert _where(lambda t: bool(tools & set(_code_strings(t)))) == [HOMES["sign"]]


def test_only_the_volumes_module_knows_a_volumes_name() -> None:
    def knows(tree: ast.Module) -> bool:
        return any(
            _VOLUME_PATTERN.search(s)
            or s == "format:03d"
            or ("[0-9][0-9][0-9]" in s and not any(c.isspace() for c in s))
            for s in _code_strings(tree)
        )

    assert _where(knows) == [HOMES["volumes"]]


def test_the_set_a_delta_leaves_to_its_base_is_made_once() -> None:
    """By the manifest (`Manifest.omitted_files`), which the delta module's `left_out` and
    the server's completion read."""

    def makes(tree: ast.Module) -> bool:
        return any(
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") in ("set", "frozenset")
            and any(
                isinstance(a, ast.Attribute)
                and a.attr == "omitted"
                and getattr(a.value, "attr", "") == "delta"
                for a in node.args
            )
            for node in ast.walk(tree)
        )

    assert _where(makes) == ["airgap/contract/manifest_values.py"]


def test_the_licences_are_grouped_in_one_place() -> None:
    """Bundles' licences are judged and grouped once (LICENSES.txt and `inspect` show the same
    groups); assets/sbom.py judges models' and datasets' card licences for their own report."""

    def judges(tree: ast.Module) -> bool:
        return any(
            isinstance(node, ast.ImportFrom)
            and node.module == "verl_bundle.wheel.licenses"
            and any(a.name == "judge" for a in node.names)
            for node in ast.walk(tree)
        )

    assert _where(judges) == ["assets/sbom.py", HOMES["licences"]]
    groups = [
        rel
        for rel, tree in _sources().items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and node.name == "LicenceGroup"
    ]
    assert groups == [HOMES["licences"]]
