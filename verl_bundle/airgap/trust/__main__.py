"""The installed verifier, isolated: `python3 -I -B ROOT/lib/verl_bundle/airgap/trust ...` (what
ROOT/bin/verl-bundle-verify runs), and its setup from an approved bundle's lib/ (verifier.py).

Run as a directory, Python puts this directory first on the path; the lib/ three levels up is
what must come first, and its bytecode is never read (as airgap/__main__.py does)."""

from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    _HERE = os.path.dirname(os.path.abspath(__file__))
    if sys.path and os.path.abspath(sys.path[0]) == _HERE:
        del sys.path[0]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(_HERE))))
    sys.pycache_prefix = "/dev/null/none"
    from verl_bundle.airgap.install import bytecode

    bytecode.switch()

from verl_bundle.airgap.trust.verifier import main  # after the path is the lib's

if __name__ == "__main__":
    sys.exit(main())
