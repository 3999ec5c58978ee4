"""--dry-run: the commands a real run would execute now, from the same planning code, not run.

Nothing is written: the markers of earlier runs are read (so a rerun's plan shows what is
already installed), and whether the bundled uv runs here is tried in a temporary directory.
"""

from __future__ import annotations

import os
import shlex
from typing import TYPE_CHECKING

from verl_bundle.airgap.errors import ServerError
from verl_bundle.airgap.install import bundled
from verl_bundle.airgap.install import env as envs
from verl_bundle.airgap.install import phases as ph
from verl_bundle.airgap.postinstall.left_out import left_out

if TYPE_CHECKING:
    from verl_bundle.airgap.install.steps import Installer


def dry_run(inst: Installer) -> None:
    opts, m, say = inst.opts, inst.m, inst.out.say
    kind = envs.check_prefix(opts, inst.target)
    if opts.image:
        from verl_bundle.airgap.install.image import check_target

        check_target(opts.image, inst.target)  # refused as the real run would, at once
    planned = inst.base_plan()  # --base checked as the real run checks it (nothing placed)
    say(f"Plan for {m.name} (dry run: nothing is changed)")
    say(f"  bundle:  {opts.bundle}")
    if planned is not None:
        taken, already = planned
        say(
            f"  base:    {len(taken)} file(s) from {opts.base}, each checked by its sha256"
            + (f"; {already} already here" if already else "")
        )
    try:
        python = envs.choose_python(opts, m, inst.target)
        got = envs.shown_version(python)
        say(f"  python:  {python} is {got} (must be {m.target.python})")
        if opts.bundled_python and m.interpreter is not None:
            unpacked = os.path.isfile(os.path.join(opts.bundled_python, bundled.MARK))
            say(
                f"           the bundled CPython {m.interpreter.version}"
                + ("" if unpacked else f", to be unpacked into {opts.bundled_python}")
                + f": {bundled.why(opts, m)}"
            )
    except ServerError:
        python = f"python{m.target.python}"
        say(f"  python:  none found (must be {m.target.python}; pass --python PATH)")
    where = (
        "existing environment"
        if kind == "env"
        else ("new venv" if kind == "new" else "venv made by an earlier run")
    )
    say(f"  target:  {inst.target} ({where})")
    inst.no_downgrade()  # an older release is refused here as the real run refuses it
    say(
        "  1. verify: every file against SHA256SUMS and manifest.json; lib/ holds only listed files"
    )
    say(f"  2. python: {python} must be Python {m.target.python} ({m.target.python_tag})")
    if opts.skip_doctor:
        say("  3. doctor: skipped (--skip-doctor)")
    else:
        say(
            f"  3. doctor --bundle {shlex.quote(opts.bundle)} --python {shlex.quote(python)} --prefix {shlex.quote(inst.target)}"
        )
    tools = envs.find_tools(m, opts.bundle, inst.target_py, inst.state, True)
    boot = ph.pip_bootstrap(tools, inst.state) if kind != "env" else None
    pip = boot is not None and not inst.state.done("pip", ph.pip_key(m))
    repairs: dict[str, list[str]] = {}
    if opts.repair and os.access(inst.target_py, os.X_OK):
        from verl_bundle.airgap.confined import Confined
        from verl_bundle.airgap.install import strays

        paths = envs.site_paths(inst.target_py, inst.target)
        with Confined(inst.target) as prefix:  # read only: what a real run would remove
            strays.clear_links(prefix, paths, say, True, dry=True)
            strays.remove_unlisted(prefix, say, dry=True)
        repairs = ph.differing(m, opts.skip_phases, paths)
        for phase_name, lines in repairs.items():
            say(f"  --repair: {phase_name}: {'; '.join(lines)}")
    plans = ph.plan_phases(m, opts, inst.target, tools, inst.state, repairs, pip)
    if kind == "env":
        say(f"  4. venv: none (into {inst.target}); its own pip is not changed")
    else:
        venv = (
            "exists"
            if os.access(inst.target_py, os.X_OK)
            else shlex.join(envs.venv_command(python, inst.target, tools.uv))
        )
        say(f"  4. venv: {venv}")
        first = next((p for p in plans if p.pip), None)
        if boot is not None and not pip:
            say("     pip: already installed")
        elif first is not None:
            say(f"     pip: the bundled pip, with phase {first.phase}'s uv call (by its sha256)")
        elif boot is not None:
            say(f"     pip: {boot.show()}")
    for i, plan in enumerate(plans, start=1):
        phase = m.phase(plan.phase)
        packages = " ".join(phase.packages) if phase else ""
        if plan.action == "install":
            extra = {
                "interrupted": " (interrupted before: its incomplete distributions are removed by their files first)",
                "changed": " (changed since installed: what differs is replaced)",
                "repair": " (--repair: what differs from the bundle is removed, then reinstalled)",
            }.get(plan.why, "")
            say(f"  5.{i} phase {plan.phase} ({plan.tool}){extra}: {plan.command.show()}")
        else:
            say(f"  5.{i} phase {plan.phase}: {plan.why}")
        say(f"       {packages}")
    skip_phases = list(opts.skip_phases)
    result = inst.state.path("checks.json")
    say(f"  6. post-install checks: {inst.postinstall_command(skip_phases, result).show()}")
    for item in left_out(m, skip_phases):  # what leaving phases out means for the verdict
        say(f"     {item.line()}")
    say(f"  7. activate: source {shlex.quote(inst.target + '/bin/activate')}")
    if opts.image:
        image = shlex.quote(os.path.abspath(opts.image))
        say(
            f"  8. image: compile every module (all cores), then mksquashfs "
            f"{shlex.quote(inst.target)} {image} -noappend -all-root, and {image}.sha256"
        )
