#!/usr/bin/env bash
# Create (or reuse) the project's virtual environment in .venv and install the package into it
# from the lock, constraints.txt, so every machine gets the dependency set the tests passed with.
# A venv because a stock Debian/Ubuntu Python refuses a bare `pip install .` (PEP 668).
#
#   bash scripts/install.sh        # the controller and its CLI: .venv/bin/predictive-autoscaler
#   bash scripts/install.sh --dev  # editable, plus the test and lint tools (scripts/test.sh uses this)
#
# Env: VENV (default .venv), PYTHON (default python3, must be >= 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
PYTHON="${PYTHON:-python3}"

case "${1:-}" in
  "") target=. ;;
  --dev) target=(-e '.[dev]') ;;
  *) echo "usage: bash scripts/install.sh [--dev]" >&2; exit 2 ;;
esac
[ "${target[0]}" = . ] && target=(.)

if ! command -v "$PYTHON" >/dev/null; then
  echo "error: $PYTHON not found: install Python 3.11 or newer (Debian/Ubuntu: apt-get install python3 python3-venv)" >&2
  exit 1
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "error: $("$PYTHON" -V 2>&1) is too old: predictive-autoscaler needs Python 3.11 or newer (set PYTHON=python3.X)" >&2
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  if ! "$PYTHON" -m venv "$VENV" >/dev/null 2>&1; then
    rm -rf "$VENV"
    # Debian/Ubuntu ship venv's pip bootstrap separately, as python3.X-venv.
    pkg="python$("$PYTHON" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')-venv"
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
      echo "installing $pkg (Debian/Ubuntu: python3 -m venv needs it)" >&2
      export DEBIAN_FRONTEND=noninteractive
      apt-get update -qq && apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null
      "$PYTHON" -m venv "$VENV"
    else
      echo "error: '$PYTHON -m venv' failed: install it with 'sudo apt-get install $pkg' and run this again" >&2
      exit 1
    fi
  fi
fi

# PIP_CONSTRAINT (not -c) so that the isolated build of the package gets the locked setuptools too.
PIP_CONSTRAINT="$PWD/constraints.txt" "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${target[@]}"
