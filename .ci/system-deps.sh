#!/usr/bin/env bash
# System packages the project needs (Debian 12). Idempotent; quiet when all present.
set -euo pipefail
need=()
command -v bwrap >/dev/null || need+=(bubblewrap)
command -v git >/dev/null || need+=(git)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need[@]}" >/dev/null
fi
