#!/usr/bin/env bash
# One-time (idempotent) set-up: a project virtualenv in .venv with the pinned CPU torch, the project
# and its test tools, then the embedded default model built from configs (no hub). Re-running is fast.
# The three installs are independent (.venv, the vLLM venv, the Debian packages), so on a fresh machine they
# run at once: about the longest one's time, not their sum. Each part's output is printed when it ends.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
parts=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$parts"' EXIT
# waits for one background part, prints its output, and fails the set-up with its exit code if it failed
finish() {
  local rc=0
  wait "$2" || rc=$?
  grep -v "is ignored: it is neither" "$parts/$1.log" >&2 || true
  if [ "$rc" != 0 ]; then
    echo "[setup] the $1 part failed (exit $rc; its output is above)" >&2
    exit "$rc"
  fi
}

# the vllm engine's own venv (.venv-vllm; INFEROPT_SKIP_VLLM=1 skips it)
bash scripts/setup_vllm.sh > "$parts/vllm.log" 2>&1 &
vllm_pid=$!
# headless Chromium for the report screenshots (~30 s once; INFEROPT_SKIP_CHROMIUM=1 skips it), then nginx (the
# node-failure scenario's load balancer) only when missing and apt-get exists (INFEROPT_SKIP_NGINX=1 skips it):
# one after the other, as both take apt's lock
{
  bash scripts/setup_chromium.sh
  if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ] && command -v apt-get >/dev/null 2>&1; then
    bash scripts/setup_nginx.sh
  fi
} > "$parts/apt.log" 2>&1 &
apt_pid=$!

if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.inferopt-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  echo "[setup] installing into .venv (first time: a few minutes)" >&2
  .venv/bin/python -m pip install -q --disable-pip-version-check --upgrade pip
  # Pin torch first so nothing pulls a multi-GB CUDA build (on this machine the CPU wheel is on disk).
  .venv/bin/python -m pip install -q --disable-pip-version-check "torch==2.13.0"
  .venv/bin/python -m pip install -q --disable-pip-version-check -e ".[dev]"
  touch "$stamp"
fi
finish vllm "$vllm_pid"
finish apt "$apt_pid"
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
.venv/bin/python -m inferopt.model.build --name tiny-llama --quiet
