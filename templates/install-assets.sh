#!/bin/sh
# Install this asset bundle (models and datasets for verl) on an air-gapped server.
#
#   ./install-assets.sh --prefix DIR [--assets-dir DIR] [--python PATH] [--json]
#
# Checks every file against manifest.json and SHA256SUMS while copying it, places the models
# and datasets under DIR/assets (or --assets-dir, e.g. a shared filesystem), writes
# DIR/verl-env.sh (HF_HUB_OFFLINE=1 and friends; the venv's bin/activate sources it), checks
# that the model's config and tokenizer load offline, and prints the verl overrides.
# Exit codes: 0 ready, 1 failed (e.g. disk full), 2 usage, 3 bundle damaged, 4 not ready.
# This script only finds a python3 >= 3.8; the work is done by the bundle's own
# standard-library code in lib/, run isolated (-I: no user site, no PYTHON* variables).
set -eu

HERE=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd)

find_python() {
  for candidate in "${VERL_BUNDLE_PYTHON:-}" python3 python3.13 python3.12 python3.11 python3.10 python3.9 python3.8; do
    [ -n "$candidate" ] || continue
    command -v "$candidate" >/dev/null 2>&1 || continue
    if "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 8) else 1)' 2>/dev/null; then
      command -v "$candidate"
      return 0
    fi
  done
  return 1
}

if ! PY=$(find_python); then
  echo "error: install-assets.sh needs python3 >= 3.8 (apt: python3; dnf/yum: python3), or set VERL_BUNDLE_PYTHON=/path/to/python3" >&2
  exit 2
fi

exec "$PY" -I -B -c 'import sys; sys.path.insert(0, sys.argv.pop(1)); from verl_bundle.airgap.cli import main; sys.exit(main())' \
  "$HERE/lib" assets install "$HERE" "$@"
