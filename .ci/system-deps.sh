#!/usr/bin/env bash
# System packages the project needs (Debian 12). Idempotent; quiet when all present.
#
# docker-registry (Debian's registry 2.8) is only a binary for the tests: tests/images
# start their own instance on 127.0.0.1 (tests/images/registry.py). Its package would start
# and enable a service on :5000, so no service may start while it installs (a policy-rc.d
# that denies it, which invoke-rc.d and deb-systemd-invoke obey) and the unit is disabled.
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v git >/dev/null || need+=(git)
command -v curl >/dev/null || need+=(curl)
command -v docker-registry >/dev/null || need+=(docker-registry)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  policy=/usr/sbin/policy-rc.d
  if [ ! -e "$policy" ]; then  # one already there (e.g. in a container) stays as it is
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
  if [[ " ${need[*]} " == *" docker-registry "* ]]; then
    if [ -d /run/systemd/system ]; then
      $SUDO systemctl disable --now docker-registry.service >/dev/null 2>&1 || true
    elif command -v systemctl >/dev/null; then  # works without a running systemd, SysV links too
      $SUDO systemctl disable docker-registry.service >/dev/null 2>&1 || true
    else
      $SUDO update-rc.d docker-registry disable >/dev/null 2>&1 || true
    fi
  fi
fi
