"""The bundle's code runs from source only, whatever bytecode sits beside it; the interpreter's
own modules load from their bytecode (install/bytecode.py)."""

from __future__ import annotations

import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

from verl_bundle.airgap.install.steps import BOOT


def test_planted_bytecode_in_lib_never_runs_and_the_stdlib_keeps_its_own(tmp_path: Path) -> None:
    lib = tmp_path / "lib"
    shutil.copytree(
        ROOT / "verl_bundle", lib / "verl_bundle", ignore=shutil.ignore_patterns("__pycache__")
    )
    tool = lib / "verl_bundle" / "airgap" / "tool.py"
    good = "print('source')\n"
    evil = "print('planted')\n"
    # Bytecode of other code, stamped with the source's size and time: what Python would use.
    tool.write_text(evil)
    stamp = os.stat(tool)
    pyc = py_compile.compile(str(tool), doraise=True)
    tool.write_text(good.ljust(len(evil) - 1) + "\n")
    os.utime(tool, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))
    assert pyc is not None and Path(pyc).is_file() and os.path.getsize(tool) == stamp.st_size
    code = BOOT.replace(
        "from verl_bundle.airgap.cli import main; sys.exit(main(sys.argv[1:]))",
        "import verl_bundle.airgap.tool, json; "
        "print(type(json.__spec__.loader).__name__, sys.pycache_prefix)",
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-B", "-c", code, str(lib)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.split("\n")[:2] == ["source", "SourceFileLoader None"]
