#!/bin/sh
# Check this server before installing: ./doctor [--json] [--require-gpu] [--python PATH]
# [--prefix DIR] [--skip-phase NAME]...
# The doctor runs on a Python 3.8 or newer ($PYTHON, else --python, else the python of the
# environment already in --prefix DIR, else python3), isolated:
# -I (no PYTHON* variables, no user site, not the current directory), -B and a pycache prefix
# that cannot exist (no bytecode read from or written to the bundle), the bundle's lib/ alone
# added to the path.
here=$(CDPATH='' cd -- "$(dirname -- "$0")" && pwd -P) || {
  echo "doctor: cannot find the bundle directory of $0" >&2
  exit 2
}

given=""
prefix=""
want_next=""
for arg in "$@"; do
  case "$want_next" in
    python) given=$arg; want_next=""; continue ;;
    prefix) prefix=$arg; want_next=""; continue ;;
  esac
  case "$arg" in
    --python) want_next=python ;;
    --python=*) given=${arg#--python=} ;;
    --prefix) want_next=prefix ;;
    --prefix=*) prefix=${arg#--prefix=} ;;
  esac
done
py=${PYTHON:-$given}
# An environment already installed in --prefix: its own python (the one it was made from).
if [ -z "$py" ] && [ -n "$prefix" ] && [ -x "$prefix/bin/python" ]; then
  py=$prefix/bin/python
fi
py=${py:-python3}
case $py in */*) [ -e "$py" ] ;; *) command -v "$py" >/dev/null ;; esac || {
  echo "doctor: $py: no such file; use --python PATH or PYTHON=PATH ./doctor with a Python 3.8 or newer (from the intranet OS mirror or the install media)." >&2
  exit 2
}

# X.Y of the interpreter, asked in a form Python 2 understands too, with nothing from the
# environment or site (-E -s -S); nothing when it does not run.
got=$("$py" -E -s -S -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
case "$got" in
  3.[89] | 3.[1-9][0-9]) ;;
  "")
    echo "doctor: $py does not run: needs Python 3.8+; use --python PATH or PYTHON=PATH ./doctor with a Python 3.8 or newer (from the intranet OS mirror or the install media)." >&2
    exit 4
    ;;
  *)
    echo "doctor: $py is Python $got, too old: needs Python 3.8+; use --python PATH or PYTHON=PATH ./doctor with a Python 3.8 or newer (from the intranet OS mirror or the install media)." >&2
    exit 4
    ;;
esac

exec "$py" -I -B -c '
import sys
sys.pycache_prefix = "/dev/null/none"
sys.path.insert(0, sys.argv.pop(1))
from verl_bundle.airgap.install import bytecode
bytecode.switch()  # lib/ from source only; the standard library from its own bytecode
from verl_bundle.airgap.cli import main
sys.exit(main(sys.argv[1:]))
' "$here/lib" doctor --bundle "$here" "$@"
