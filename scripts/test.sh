#!/usr/bin/env bash
# Install everything the tests need, then run the checks and the test suite.
# Used by the README ("run the tests") and by .ci/run. Safe to run again: installs are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real servers the tests start on 127.0.0.1 (Debian packages). Without root or apt, the tests
# that need them are skipped on a developer's machine (and fail under CI=true).
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null \
   || ! command -v prometheus-alertmanager >/dev/null || ! command -v amtool >/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null
  else
    echo "note: prometheus/alertmanager not installed and no root apt-get: their tests will be skipped" >&2
  fi
fi

# The project's virtual environment (.venv), from the lock: the same set on every machine.
bash scripts/install.sh --dev
PY=.venv/bin/python

echo "== ruff"; "$PY" -m ruff check autoscaler models tests benchmarks
echo "== mypy --strict"; "$PY" -m mypy autoscaler models
echo "== import contracts"; .venv/bin/lint-imports
echo "== pytest"; "$PY" -m pytest "$@"
