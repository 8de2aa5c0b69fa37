#!/usr/bin/env bash
# Build the docker backend's images offline (no registry is reachable here). Cached.
#
#  1. base image   $SWE_BASE_IMAGE: `debootstrap --variant=minbase bookworm` + `docker import`,
#                  only when absent (~1.5 min);
#  2. sandbox image $SWE_SANDBOX_IMAGE: docker/sandbox.Dockerfile on top (apt over http),
#                  skipped when the image carries the same build-inputs hash label.
#
# Needs a running engine (docker/setup-engine.sh). Run from anywhere.
# `build-images.sh base` builds only the base image (used by docker/build-env-image.sh);
# no argument (or `all`) builds both.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
BASE_IMAGE=${SWE_BASE_IMAGE:-swe-openenv-base:bookworm}
SANDBOX_IMAGE=${SWE_SANDBOX_IMAGE:-swe-openenv-sandbox:latest}
MIRROR=${DEBIAN_MIRROR:-}
LABEL=org.swe-openenv.build-inputs
TOOLS_LABEL=org.swe-openenv.blocked-tools  # read by sandbox/docker.py (SandboxInfo.blocked_tools_absent)
RECIPE=2  # bump when this script's build steps change

log() { echo "[build-images] $*" >&2; }

# The Debian mirror this machine's apt already uses (deb822 .sources or one-line sources.list),
# so no registry host name lives in the repository. $DEBIAN_MIRROR overrides it.
apt_mirror() {
    local f uri
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        uri=$(awk '/^URIs:/ {u=$2} /^Suites:/ && u != "" && $0 ~ /bookworm( |$)/ {print u; exit}' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
    for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        uri=$(awk '$1 == "deb" && $0 ~ / bookworm / {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' "$f")
        [ -n "$uri" ] && { echo "$uri"; return; }
    done
}

build_base() {
    if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
        log "base image $BASE_IMAGE present"
        return
    fi
    if ! command -v debootstrap >/dev/null; then
        log "installing debootstrap with apt"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null \
            || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
    fi
    local rootfs
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/swe-rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' RETURN
    local mirror=${MIRROR:-$(apt_mirror)}
    [ -n "$mirror" ] || { log "no Debian bookworm mirror in this machine's apt sources: set DEBIAN_MIRROR"; return 1; }
    log "debootstrap --variant=minbase bookworm from $mirror (takes ~1.5 min)"
    debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
        || { tail -n 30 "$rootfs.log" >&2; rm -f "$rootfs.log"; return 1; }
    rm -f "$rootfs.log"
    # Mirrors here may serve Release files past their Valid-Until date.
    printf 'Acquire::Check-Valid-Until "false";\nAcquire::Check-Date "false";\n' \
        >"$rootfs/etc/apt/apt.conf.d/99no-valid-until"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    log "docker import -> $BASE_IMAGE"
    tar --numeric-owner -C "$rootfs" -c . | docker import --change 'CMD ["/bin/bash"]' - "$BASE_IMAGE" >/dev/null
}

blocked_tools() {
    # Single source of truth: DEFAULT_BLOCKED_TOOLS in sandbox/models.py (read with stdlib only).
    python3 - "$ROOT/sandbox/models.py" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in tree.body:
    target = getattr(node, "target", None) or (node.targets[0] if isinstance(node, ast.Assign) else None)
    if getattr(target, "id", None) == "DEFAULT_BLOCKED_TOOLS":
        print(" ".join(ast.literal_eval(node.value)))
        break
else:
    sys.exit("DEFAULT_BLOCKED_TOOLS not found")
PY
}

build_sandbox() {
    local tools base_id inputs current
    tools=$(blocked_tools)
    base_id=$(docker image inspect --format '{{.Id}}' "$BASE_IMAGE")
    inputs=$( { cat "$HERE/sandbox.Dockerfile" "$ROOT/sandbox/harden_image.sh"; echo "$RECIPE $tools"; echo "$base_id"; } \
        | sha256sum | cut -c1-16)
    current=$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$SANDBOX_IMAGE" 2>/dev/null || true)
    if [ "$current" = "$inputs" ]; then
        log "sandbox image $SANDBOX_IMAGE up to date ($inputs)"
        return
    fi
    log "building $SANDBOX_IMAGE ($inputs)"
    # The build context is the one hardening script (shared with derived task images).
    local ctx
    ctx=$(mktemp -d "${TMPDIR:-/tmp}/swe-sandbox-ctx.XXXXXX")
    cp "$HERE/sandbox.Dockerfile" "$ROOT/sandbox/harden_image.sh" "$ctx/"
    docker build -q -t "$SANDBOX_IMAGE" --label "$LABEL=$inputs" --label "$TOOLS_LABEL=$tools" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "BLOCKED_TOOLS=$tools" \
        -f "$ctx/sandbox.Dockerfile" "$ctx" >/dev/null || { rm -rf "$ctx"; return 1; }
    rm -rf "$ctx"
    log "built $SANDBOX_IMAGE"
}

docker info >/dev/null 2>&1 || { log "no Docker engine answers; run docker/setup-engine.sh first"; exit 1; }
case "${1:-all}" in
    base) build_base ;;
    all) build_base; build_sandbox ;;
    *) log "usage: $0 [all|base]"; exit 2 ;;
esac
