"""The trainer dry run follows the fork (airgap/postinstall/dryrun.py row selection): a fork of a
known release takes that release's recipe by its version; a version past every recipe (verl
main's 0.10.0.dev0) takes the newest; either way the recipe's entry points are probed in the
installed environment first (airgap/inside/sites.py, reading sources, importing nothing), and a
fork whose entry moved is told so in one line, never passed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import site_packages

from verl_bundle.airgap.postinstall import dryrun, dryrun_report
from verl_bundle.airgap.postinstall.dryrun import DryRunRequest, load_table, moved_sites, row_for

# verl 0.9's entry points as verl 0.9.1 (and main at 7bc80c00) define them: the modules and
# names the 0.9 recipe's sites name, nothing else.
VERL_09 = {
    "verl/__init__.py": "",
    "verl/trainer/__init__.py": "",
    "verl/trainer/main_ppo.py": "import hydra\n\n@hydra.main()\ndef main(config):\n    pass\n",
    "verl/utils/__init__.py": "",
    "verl/utils/config.py": "def validate_config(config):\n    pass\n",
    "verl/utils/tokenizer/__init__.py": "from .tokenizer import hf_tokenizer\n",
    "verl/utils/tokenizer/tokenizer.py": "def hf_tokenizer(path):\n    pass\n",
    "verl/utils/dataset/__init__.py": "",
    "verl/utils/dataset/rl_dataset.py": "class RLHFDataset:\n    def __init__(self):\n        pass\n",
    "verl/trainer/ppo/__init__.py": "",
    "verl/trainer/ppo/v1/__init__.py": "",
    "verl/trainer/ppo/v1/trainer_base.py": (
        "class PPOTrainer:\n"
        "    def _init_resource_pool_mgr(self):\n        pass\n"
        "    def fit(self):\n        pass\n"
    ),
    "verl/single_controller/__init__.py": "",
    "verl/single_controller/ray/__init__.py": "from .base import ResourcePoolManager\n",
    "verl/single_controller/ray/base.py": (
        "class ResourcePoolManager:\n    def create_resource_pool(self):\n        pass\n"
    ),
    "transfer_queue/__init__.py": "from transfer_queue.client import init\n",
    "transfer_queue/client.py": "def init(config=None):\n    pass\n",
}


@pytest.fixture
def env(tmp_path: Path) -> Path:
    """A real venv holding verl 0.9's entry points (their sources only); returns its python."""
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True
    )
    python = tmp_path / "venv" / "bin" / "python"
    root = site_packages(python)
    for rel, text in VERL_09.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return python


def test_a_fork_keeps_its_releases_recipe_and_a_later_version_takes_the_newest() -> None:
    table = load_table()
    nine = row_for("0.9.1", table)
    assert nine is not None and nine["from"] == "0.9"
    later = row_for("0.10.0.dev0", table)  # verl main: past every row's range
    assert later is not None and later["from"] == "0.9"
    assert row_for("0.2.0.post2", table) is None


def test_the_recipes_entry_points_are_found_in_the_installed_verl(env: Path) -> None:
    row = row_for("0.10.0.dev0", load_table())
    assert row is not None
    assert moved_sites(str(env), row) == []


def test_a_fork_whose_entry_moved_is_one_failed_line_and_nothing_runs(env: Path) -> None:
    """Before: the run started, and verl's entry failed on an AttributeError deep in it."""
    main_ppo = site_packages(env) / "verl/trainer/main_ppo.py"
    main_ppo.write_text("def run(config):\n    pass\n")  # the fork renamed its entry
    table = load_table()
    row = row_for("0.9.1", table)
    assert row is not None
    assert moved_sites(str(env), row) == ["verl.trainer.main_ppo:main"]
    run = dryrun.run_dry(str(env), "0.9.1", DryRunRequest(deadline=60), table)
    assert run is not None and run.events == () and run.seconds == 0.0
    (check,) = dryrun_report.checks(run, table)
    assert check.status == "fail" and check.id == "dryrun"
    assert check.summary == (
        "verl 0.9.1: verl.trainer.main_ppo:main is not there (verl 0.9's entry moved); no dry run"
    )


def test_a_later_version_runs_the_newest_recipe_only_where_it_fits(env: Path) -> None:
    trainer = site_packages(env) / "verl/trainer/ppo/v1/trainer_base.py"
    trainer.write_text("class PPOTrainer:\n    def _init_resource_pool_mgr(self):\n        pass\n")
    table = load_table()
    later = row_for("0.10.0.dev0", table)
    known = row_for("0.9.1", table)
    assert later is not None and known is not None
    moved = moved_sites(str(env), later)
    assert moved == ["verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit"]
    # A fork of 0.9.1 whose step site moved still runs (that step is not marked); the recipe
    # assumed for 0.10.0.dev0 does not fit, so it is not run.
    assert not dryrun.stops(known, moved)
    assert dryrun.stops(later, moved)
    run = dryrun.run_dry(str(env), "0.10.0.dev0", DryRunRequest(deadline=60), table)
    assert run is not None and run.moved == tuple(moved)
    (check,) = dryrun_report.checks(run, table)
    assert check.summary.startswith(
        "verl 0.10.0.dev0: verl.trainer.ppo.v1.trainer_base:PPOTrainer.fit is not there"
    )


def test_what_cannot_be_read_counts_as_present(env: Path) -> None:
    """A module bound dynamically (__getattr__) or a compiled one is not called missing."""
    tok = site_packages(env) / "verl/utils/tokenizer/__init__.py"
    tok.write_text("def __getattr__(name):\n    raise AttributeError(name)\n")
    (site_packages(env) / "verl/utils/config.py").unlink()
    (site_packages(env) / "verl/utils/config.cpython-312-x86_64-linux-gnu.so").write_bytes(b"")
    row = row_for("0.9.1", load_table())
    assert row is not None
    assert moved_sites(str(env), row) == []
