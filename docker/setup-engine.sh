#!/usr/bin/env bash
# Make a Docker engine available on this (Debian 12) machine. Idempotent.
#
#  - installs Debian's docker.io (engine 20.10) with apt when `dockerd` is missing, and
#    Debian's docker-compose (v1) when no compose (v1 or v2) is there;
#  - starts `dockerd` in the background (log: $DOCKERD_LOG) unless an engine answers;
#  - waits until `docker info` works (fails loudly after $DOCKERD_WAIT_S seconds).
#
# No registry is reachable here: images are built offline by docker/build-images.sh.
set -euo pipefail

DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
DOCKERD_WAIT_S=${DOCKERD_WAIT_S:-60}

log() { echo "[setup-engine] $*" >&2; }

engine_up() { docker info >/dev/null 2>&1; }

# Compose for compose.yaml / tests/containers: Debian's docker-compose (v1) unless a
# compose of either kind is already there.
if ! command -v docker-compose >/dev/null 2>&1 && ! docker compose version >/dev/null 2>&1; then
    log "installing docker-compose with apt"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null; then
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null
    fi
fi

if engine_up; then
    log "engine already running: $(docker version --format '{{.Server.Version}}' 2>/dev/null)"
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io with apt"
    export DEBIAN_FRONTEND=noninteractive
    if ! apt-get install -y -qq --no-install-recommends docker.io >/dev/null; then
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends docker.io >/dev/null
    fi
fi
command -v dockerd >/dev/null || { log "dockerd still missing after apt"; exit 1; }
# containerd/runc come with docker.io; iptables is needed unless bridge networking is off.
for tool in containerd runc; do
    command -v "$tool" >/dev/null || { log "$tool missing"; exit 1; }
done

if [ -S /var/run/docker.sock ] && ! pgrep -x dockerd >/dev/null; then
    rm -f /var/run/docker.sock  # stale socket of a dead engine
fi
if ! pgrep -x dockerd >/dev/null; then
    log "starting dockerd (log: $DOCKERD_LOG)"
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    # setsid + nohup: the engine outlives this script and the CI step that ran it.
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
fi

for _ in $(seq 1 "$((DOCKERD_WAIT_S * 2))"); do
    if engine_up; then
        log "engine up: $(docker version --format '{{.Server.Version}}')"
        exit 0
    fi
    sleep 0.5
done
log "dockerd did not come up within ${DOCKERD_WAIT_S}s; last log lines:"
tail -n 30 "$DOCKERD_LOG" >&2 || true
exit 1
