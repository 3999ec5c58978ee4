"""The README and docs/ tell the truth about the code: every command has a row naming every option
its --help lists (on the host, `verl-bundle ...`, and on the server, `./doctor`, `./install.sh`),
every profile's row names the locations it needs beyond the default index, the quick start's
bundle name and mirror lines are the ones the code gives, and every link between the documents resolves."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from conftest import ROOT
from support.cli import run

from verl_bundle.airgap.cli import main
from verl_bundle.airgap.install.options import usage
from verl_bundle.bundle.plan import name_for
from verl_bundle.cli.render.profile import profile_sources
from verl_bundle.profile.catalog import builtin_profiles, profile_for_cuda, target_for
from verl_bundle.profile.mirrors import make_mirrors, mirror_args, needs, only_default_index
from verl_bundle.profile.model import Profile

README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = sorted((ROOT / "docs").glob("*.md"))
OPTION = re.compile(r"^\s+(?:(-\w), )?(--[a-z][a-z-]*)", re.M)
COMMAND = re.compile(r"^  ([a-z][a-z-]*)\s", re.M)


def row(start: str) -> str:
    """The README table row that begins with `start` (in backticks)."""
    found = [line for line in README.splitlines() if line.startswith(f"| `{start}")]
    assert len(found) == 1, f"README: {len(found)} rows for {start!r}"
    return found[0]


def options(help_text: str) -> dict[str, str]:
    """--long -> its short form ("" when none), for every option but --help (read from the
    options section only: the description may quote another command's option)."""
    listed = re.split(r"^options:$", help_text, maxsplit=1, flags=re.M | re.I)[-1]
    listed = re.split(r"^commands:$", listed, maxsplit=1, flags=re.M | re.I)[0]
    return {long: short for short, long in OPTION.findall(listed) if long != "--help"}


def missing(wanted: dict[str, str], text: str) -> list[str]:
    """The options named neither by their long nor their short form (`-o DIR`) in `text`."""
    named = [o for o, short in wanted.items() if o in text or (short and f"{short} " in text)]
    return sorted(set(wanted) - set(named))


def subcommands(help_text: str) -> list[str]:
    listed = re.split(r"^commands:$", help_text, maxsplit=1, flags=re.M | re.I)
    return COMMAND.findall(listed[1]) if len(listed) == 2 else []


def commands(capsys: pytest.CaptureFixture[str]) -> list[str]:
    """Every command a user can run, as `verl-bundle --help` and each group's --help list them
    (a group that also runs alone, `profiles`, counts as a command)."""
    found = []
    for top in subcommands(run(["--help"], capsys).out):
        help_text = run([top, "--help"], capsys).out
        subs = subcommands(help_text)
        if not subs or options(help_text):  # a command, or a group that runs on its own
            found.append(top)
        found += [f"{top} {sub}" for sub in subs]
    return found


def test_every_host_command_has_a_row_naming_its_options(
    capsys: pytest.CaptureFixture[str],
) -> None:
    found = commands(capsys)
    assert {"build", "profiles", "profiles show", "slurm install", "fleet report"} <= set(found)
    for command in found:
        result = run([*command.split(), "--help"], capsys)
        assert result.code == 0, command
        longer = [c for c in found if c.startswith(f"{command} ")]  # profiles: not profiles show
        lines = [
            line
            for line in README.splitlines()
            if line.startswith(f"| `verl-bundle {command} ")
            and not any(line.startswith(f"| `verl-bundle {c} ") for c in longer)
        ]
        assert len(lines) == 1, f"README: {len(lines)} rows for {command!r}"
        assert missing(options(result.out), lines[0]) == [], command


def test_the_bundle_doctor_row_names_its_options() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["doctor", "--help"]) == 0
    wanted = options(out.getvalue())
    del wanted["--bundle"]  # ./doctor passes its own bundle
    assert "--skip-phase" in wanted
    assert missing(wanted, row("./doctor ")) == []


def test_the_install_synopsis_names_every_option() -> None:
    wanted = options(usage(None))
    assert "--skip-phase" in wanted and "--into-env" in wanted
    start = README.index("    ./install.sh [--prefix DIR]")
    synopsis = README[start : README.index("\n\n", start)]
    assert missing(wanted, synopsis) == []


@pytest.mark.parametrize("profile", builtin_profiles(), ids=lambda p: p.name)
def test_each_profile_row_names_what_it_needs_beyond_the_default_index(profile: Profile) -> None:
    needed = set(profile_sources(profile)["locations"]) - {"pypi"}
    line = row(f"{profile.name}` |")
    cell = line.split(" | ")[2]  # profile | stack | needs beyond the default index | --cuda
    assert sorted(n for n in needed if f"`{n}`" not in cell) == []
    if not needed:
        assert cell.startswith("nothing")


def test_the_quick_start_bundle_name_is_the_one_build_writes() -> None:
    make = re.search(r"make bundle CUDA=(\S+) PY=(\S+)", README)
    assert make, "README: no `make bundle CUDA=X.Y PY=X.Y` line"
    cuda, python = make.groups()
    profile = profile_for_cuda(cuda)
    # the first command builds with only the default index, and the README says which do
    assert only_default_index(profile), f"the quick start's {profile.name} needs more"
    plain = [p.name for p in builtin_profiles() if only_default_index(p)]
    assert plain == ["cu121", "cu124", "cu130"]
    assert "cu121, cu124 and cu130 build from it alone" in README
    name = name_for(profile.name, target_for(profile, python, None))
    assert f"bundles/{name}.tar" in README
    # the mirror lines are the ones `profiles show NAME --mirrors` prints for that profile
    found = needs(profile)
    assert f"    {mirror_args(found)}\n" in README
    assert f"    make bundle PROFILE={profile.name} {make_mirrors(found)}\n" in README
    assert f"verl-bundle profiles show {profile.name} --mirrors" in README
    # every bundle name the README prints is that one
    assert set(re.findall(r"verl-bundle-[a-z0-9.-]+-cp\d+-[a-z0-9_]+", README)) == {name}


def test_the_set_up_section_states_the_disk_each_step_needs_and_the_suites_time() -> None:
    """A newcomer learns before starting what each step costs in disk and how long the suite
    runs: the figures measured on the real cu130 stack, each named with its step."""
    start = README.index("## Set up")
    setup = README[start : README.index("\n## ", start + 1)]
    for step, figure in (
        ("download cache", "4.3 GB"),
        ("the bundle", "4.6 GB"),
        ("stopped", "4.6 GB"),
        ("install on the server", "13 GB"),
    ):
        assert step in setup and figure in setup, (step, figure)
    assert re.search(r"`make test`[^.]*about 1,200 tests, about 12 minutes on 2\s+cores", setup)
    assert "Never `pip install verl-bundle`" in setup and "`verl-offline-bundle`" in setup


# -- links -------------------------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
CODE = re.compile(r"`[^`\n]*`")


def prose(text: str) -> str:
    """The text without fenced blocks, indented code blocks or code spans (links there are
    examples, not links)."""
    text = FENCE.sub("", text)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("    "))
    return CODE.sub("", text)


def anchors(text: str) -> set[str]:
    """The heading anchors a Markdown renderer (GitHub's) gives this document."""
    seen: dict[str, int] = {}
    found = set()
    for line in FENCE.sub("", text).splitlines():
        m = re.match(r"^#{1,6} (.+?)\s*#*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        found.add(slug if n == 0 else f"{slug}-{n}")
    return found


def links(doc: Path) -> list[tuple[Path, str]]:
    """(the document, its anchor or "") for every link to a local file in `doc`."""
    found = []
    for target in LINK.findall(prose(doc.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:: not ours to check offline
            continue
        path, _, anchor = target.partition("#")
        found.append(((doc.parent / path).resolve() if path else doc, anchor))
    return found


def test_the_readme_links_every_doc() -> None:
    linked = {path for path, _ in links(ROOT / "README.md")}
    assert DOCS and set(DOCS) <= linked


def broken(doc: Path, root: Path = ROOT) -> list[str]:
    """Each link in `doc` to a file that does not exist, or to a heading its file lacks."""
    found = []
    for path, anchor in links(doc):
        if not path.exists():
            found.append(f"{path.relative_to(root)}: no such file")
        elif anchor and anchor not in anchors(path.read_text(encoding="utf-8")):
            found.append(f"{path.relative_to(root)}#{anchor}: no such heading")
    return found


@pytest.mark.parametrize("doc", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_every_internal_link_resolves(doc: Path) -> None:
    assert broken(doc) == []


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    doc = tmp_path / "a.md"
    (tmp_path / "b.md").write_text(
        "# B\n\n## Two words: `here`\n\n```sh\n# not a heading\n```\n", encoding="utf-8"
    )
    doc.write_text(
        "# A\n[ok](b.md#two-words-here) [self](#a) [no file](c.md) [no heading](b.md#three)\n"
        "[web](https://example.invalid/x.md) `[code](d.md)`\n\n    [indented](e.md)\n",
        encoding="utf-8",
    )
    assert broken(doc, tmp_path) == ["c.md: no such file", "b.md#three: no such heading"]
    assert anchors((tmp_path / "b.md").read_text(encoding="utf-8")) == {"b", "two-words-here"}
