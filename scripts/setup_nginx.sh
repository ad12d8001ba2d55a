#!/usr/bin/env bash
# One-time (idempotent) install of nginx, the load balancer the node-failure validation scenario puts in
# front of its engine replicas (inferopt/validate/loadbalancer.py writes its config into a temp dir and
# runs it on 127.0.0.1 only; the system's own nginx service is never started or configured).
#
# What this does: nothing if an nginx binary is already on PATH or in /usr/sbin; else, where apt-get exists
# (Debian/Ubuntu), `apt-get install -y nginx-light` (as root, or through sudo when it is there). Where neither
# holds it says so and exits 0: the node-failure scenario and its tests then skip with that reason.
# INFEROPT_SKIP_NGINX=1 skips it all (exit 0).
# Deliberately not here: any nginx configuration, and enabling or starting the nginx system service.
set -euo pipefail
if [ "${INFEROPT_SKIP_NGINX:-0}" = "1" ]; then
  echo "[setup_nginx] INFEROPT_SKIP_NGINX=1: skipping nginx (the node-failure scenario will skip)" >&2
  exit 0
fi
if command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "[setup_nginx] no nginx and no apt-get: install nginx yourself for the node-failure scenario (it skips without)" >&2
  exit 0
fi
SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo -n"; else
    echo "[setup_nginx] not root and no sudo: run 'apt-get install -y nginx-light' as root for the node-failure scenario" >&2
    exit 0
  fi
fi
echo "[setup_nginx] installing nginx-light with apt-get (load balancer for the node-failure scenario)" >&2
export DEBIAN_FRONTEND=noninteractive
# policy-rc.d 101: do not start the nginx service at install time (we only need the binary)
rcd=/usr/sbin/policy-rc.d
made_rcd=0
if [ ! -e "$rcd" ] && [ -z "$SUDO" ]; then printf '#!/bin/sh\nexit 101\n' > "$rcd" && chmod +x "$rcd" && made_rcd=1; fi
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends nginx-light >/dev/null || $SUDO apt-get install -y -qq --no-install-recommends nginx >/dev/null
if [ "$made_rcd" = "1" ]; then rm -f "$rcd"; fi
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ]
echo "[setup_nginx] nginx installed: $(/usr/sbin/nginx -v 2>&1 || nginx -v 2>&1)" >&2
