#!/usr/bin/env bash
# The peer load generators for benchmarks/peers.py, each in its own virtualenv (their pins clash with ours and
# with each other): .venv-aiperf (PyPI `aiperf`), .venv-inference-perf (PyPI `inference-perf`), .venv-guidellm
# (PyPI `guidellm`). Idempotent; a tool that cannot be installed is skipped with the reason written to
# .venv-<tool>.skipped (benchmarks/peers.py reports it). Not part of scripts/setup.sh: a few minutes per tool.
# inference-perf declares Python >= 3.12 (Debian 12 has 3.11; pyenv's 3.12/3.13 are used where present); else it is
# installed on 3.11 with --ignore-requires-python, and that is recorded in .venv-inference-perf/.inferopt-peer.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
PIP_Q=(-q --disable-pip-version-check)

install_tool() {  # name, venv python, pip args...
  local name="$1" py="$2"
  shift 2
  local venv=".venv-$name" stamp=".venv-$name/.inferopt-peer"
  if [ -f "$stamp" ]; then
    echo "[setup_peers] $name: already installed ($(head -1 "$stamp"))" >&2
    return 0
  fi
  rm -f "$venv.skipped"
  echo "[setup_peers] $name: installing into $venv" >&2
  local log
  log=$(mktemp)
  if "$py" -m venv "$venv" >"$log" 2>&1 && nice -n 5 "$venv/bin/python" -m pip install "${PIP_Q[@]}" "$@" >>"$log" 2>&1; then
    "$venv/bin/python" -m pip show "${TOOL_DIST:-$name}" 2>/dev/null | sed -n 's/^Version: /version /p' >"$stamp"
    [ -n "${NOTE:-}" ] && echo "$NOTE" >>"$stamp"
    echo "[setup_peers] $name: $(head -1 "$stamp")" >&2
  else
    echo "pip install failed: $(tail -3 "$log" | tr '\n' ' ')" >"$venv.skipped"
    rm -rf "$venv"
    echo "[setup_peers] $name: SKIPPED ($(cat "$venv.skipped"))" >&2
  fi
  rm -f "$log"
}

# GuideLLM: torch pinned like ours first, so pip takes the CPU wheel, not a multi-GB CUDA build
install_tool guidellm "$PY" "torch==2.13.0" "guidellm>=0.8,<0.9"
install_tool aiperf "$PY" "aiperf>=0.13,<0.14"

PY312=""  # an interpreter that runs (a pyenv shim of a version that is not selected does not)
for cand in python3.12 python3.13 "$(pyenv root 2>/dev/null)"/versions/3.1[23]*/bin/python3; do
  if [ -n "$cand" ] && "$cand" -c 'import sys, venv; assert sys.version_info >= (3, 12)' >/dev/null 2>&1; then
    PY312="$cand"
    break
  fi
done
if [ -n "$PY312" ]; then
  TOOL_DIST=inference-perf install_tool inference-perf "$PY312" "inference-perf>=0.7,<0.8"
else
  TOOL_DIST=inference-perf NOTE="installed on $("$PY" -V 2>&1) with --ignore-requires-python (it declares >= 3.12; none found)" \
    install_tool inference-perf "$PY" --ignore-requires-python "inference-perf>=0.7,<0.8"
fi
exit 0
