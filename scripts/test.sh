#!/usr/bin/env bash
# Install everything the tests need, then run the checks and the test suite.
# Used by the README ("run the tests") and by .ci/run. Safe to run again: installs are idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."

# Real servers the tests start on 127.0.0.1 (Debian packages). Without root or apt, the tests
# that need them are skipped on a developer's machine (and fail under CI=true).
# The end-to-end tests on a real kube-apiserver are opt-in (KUBE_BIN_DIR or PA_E2E_KUBECONFIG, see
# docs/development.md); with KUBE_BIN_DIR, ../shared/kube/start needs openssl, curl, xz, setsid and flock.
packages=()
for pair in prometheus:prometheus promtool:prometheus prometheus-alertmanager:prometheus-alertmanager \
            amtool:prometheus-alertmanager openssl:openssl curl:curl xz:xz-utils setsid:util-linux flock:util-linux; do
  command -v "${pair%%:*}" >/dev/null || packages+=("${pair#*:}")
done
if [ "${#packages[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends $(printf '%s\n' "${packages[@]}" | sort -u) >/dev/null
  else
    echo "note: missing ${packages[*]} and no root apt-get: the tests that need them will be skipped" >&2
  fi
fi

# The project's virtual environment (.venv), from the lock: the same set on every machine.
bash scripts/install.sh --dev
PY=.venv/bin/python

echo "== ruff"; "$PY" -m ruff check autoscaler models tests benchmarks
echo "== mypy --strict"; "$PY" -m mypy autoscaler models tests benchmarks scripts
echo "== import contracts"; .venv/bin/lint-imports
echo "== pytest"; "$PY" -m pytest "$@"
