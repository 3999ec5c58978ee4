"""The server program (airgap/cli.py), isolated: `python3 -I -B NAME/lib/verl_bundle/airgap COMMAND`.

Run as a directory this way, nothing outside the bundle's lib/ is imported in its place:
`-I` ignores PYTHON* variables, the user's site and the current directory (which
`PYTHONPATH=NAME/lib python3 -m ...` puts first, so a `verl_bundle/` there would run instead),
and its bytecode is never read (`-B` and a pycache prefix that cannot exist, as install.sh
runs it). `python3 -m verl_bundle.airgap` still works where the package is installed.
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # Python put this directory first on the path; the bundle's lib/ (two levels up) is
    # what must come first. Nothing but sys and os (both loaded already) is imported before.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == _HERE:
        del sys.path[0]
    sys.path.insert(0, os.path.dirname(os.path.dirname(_HERE)))
    sys.pycache_prefix = "/dev/null/none"
    from verl_bundle.airgap.install import bytecode

    bytecode.switch()

from verl_bundle.airgap.cli import main  # after the path is the bundle's

if __name__ == "__main__":
    sys.exit(main())
