#!/bin/sh
# Check this server before installing: ./doctor [--json] [--require-gpu]
here=$(cd "$(dirname "$0")" && pwd)
PYTHONDONTWRITEBYTECODE=1 PYTHONPATH="$here/lib${PYTHONPATH:+:$PYTHONPATH}" exec "${PYTHON:-python3}" -m verl_bundle.airgap doctor --bundle "$here" "$@"
