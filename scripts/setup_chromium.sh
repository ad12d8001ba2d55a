#!/usr/bin/env bash
# Headless Chromium for the report screenshots (scripts/screenshot.py, tests/integration/test_report_chromium.py):
# Debian's `chromium` package. Idempotent: nothing to do when a chromium is on PATH; skipped with a note when
# apt-get is missing or we are not root (the chromium test then skips with its reason).
# INFEROPT_SKIP_CHROMIUM=1 skips it. Measured here: ~30 s (apt-get update + 25 packages, --no-install-recommends).
set -euo pipefail
if [ "${INFEROPT_SKIP_CHROMIUM:-0}" = "1" ]; then
  exit 0
fi
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" >/dev/null 2>&1; then
    exit 0
  fi
done
if ! command -v apt-get >/dev/null 2>&1; then
  echo "[setup] no apt-get: install Chromium yourself for the report screenshots (the chromium test skips)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
  else
    echo "[setup] not root: run 'sudo apt-get install -y chromium' for the report screenshots (the chromium test skips)" >&2
    exit 0
  fi
fi
echo "[setup] installing chromium (Debian package, ~30 s)" >&2
export DEBIAN_FRONTEND=noninteractive
# a failed install (no network, no package) must not fail the project's set-up: the chromium test then skips
if ! { $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq &&
       $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends chromium >/dev/null; }; then
  echo "[setup] chromium install failed: the report screenshots and their test are skipped" >&2
fi
exit 0
