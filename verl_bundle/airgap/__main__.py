"""`python3 -m verl_bundle.airgap COMMAND ...`: the server program (airgap/cli.py)."""

from __future__ import annotations

import sys

from verl_bundle.airgap.cli import main

if __name__ == "__main__":
    sys.exit(main())
