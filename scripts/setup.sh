#!/usr/bin/env bash
# One-time (idempotent) set-up: a project virtualenv in .venv with the pinned CPU torch, the project
# and its test tools, then the embedded default model built from configs (no hub). Re-running is fast.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
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
bash scripts/setup_vllm.sh  # the vllm engine's own venv (.venv-vllm); INFEROPT_SKIP_VLLM=1 skips it
bash scripts/setup_chromium.sh  # headless Chromium for the report screenshots (~30 s once); INFEROPT_SKIP_CHROMIUM=1 skips it
# nginx (the node-failure scenario's load balancer), only when missing and apt-get exists; INFEROPT_SKIP_NGINX=1 skips it
if ! command -v nginx >/dev/null 2>&1 && [ ! -x /usr/sbin/nginx ] && command -v apt-get >/dev/null 2>&1; then
  bash scripts/setup_nginx.sh
fi
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
.venv/bin/python -m inferopt.model.build --name tiny-llama --quiet
