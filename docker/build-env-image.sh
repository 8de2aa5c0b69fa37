#!/usr/bin/env bash
# Build the env-server image (docker/env.Dockerfile) without a registry. Cached.
#
#  1. base image: $SWE_ENV_BASE_IMAGE, default the offline Debian bookworm minbase of
#     docker/build-images.sh (`build-images.sh base`: debootstrap + docker import, reused
#     when present). Any other value (python:3.11-slim-bookworm) is used as it is;
#  2. wheelhouse: the `env` and `datasets` extras' dependencies (swebench's log parsers grade
#     harness tasks) downloaded ON THE HOST (pip inside a
#     container cannot reach the index here) into $SWE_WHEEL_CACHE/deps-<hash>/ (kept:
#     later builds need no network), plus a freshly built wheel of this project;
#  3. `docker build` of a staged context (package sources, docker/, the wheelhouse in
#     docker/wheelhouse/), skipped when $SWE_ENV_IMAGE carries the same build-inputs label.
#
# Needs a running engine (docker/setup-engine.sh) and a host python3 >= 3.11 with pip.
# Run from anywhere. Prints the image name on stdout.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "[build-env-image] $*" >&2; }
# ROOT, OFFLINE_BASE, WHEEL_CACHE, LABEL and PYTHON; exits when no engine answers
# shellcheck source=docker/image-lib.sh
. "$HERE/image-lib.sh"
BASE_IMAGE=${SWE_ENV_BASE_IMAGE:-$OFFLINE_BASE}
ENV_IMAGE=${SWE_ENV_IMAGE:-swe-openenv-env:latest}
RECIPE=1  # bump when this script's build steps change

# The `env` and `datasets` extras' requirements, read from pyproject.toml (one per line).
requirements=$("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
extras = project["optional-dependencies"]
print("\n".join(project["dependencies"] + extras["env"] + extras["datasets"]))
PY
)


# 1. base
base_id=$(base_image_id SWE_ENV_BASE_IMAGE) || exit 1

inputs=$( { echo "$RECIPE"; echo "$base_id"; echo "$requirements"
          sources_hash docker/env.Dockerfile docker/env-entrypoint.sh docker/openenv.yaml; } | sha256sum | cut -c1-16)
current=$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$ENV_IMAGE" 2>/dev/null || true)
if [ "$current" = "$inputs" ]; then
    log "env image $ENV_IMAGE up to date ($inputs)"
    echo "$ENV_IMAGE"
    exit 0
fi

# 2. wheelhouse (dependencies cached by their requirement set; the project wheel fresh)
deps_key=$( { echo "$requirements"; uname -m; } | sha256sum | cut -c1-12)
deps_dir=$WHEEL_CACHE/deps-$deps_key
if [ ! -f "$deps_dir/.complete" ]; then
    log "downloading wheels of the env and datasets extras into $deps_dir (host network)"
    download_wheels "$deps_dir" || exit 1
    touch "$deps_dir/.complete"
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/swe-env-ctx.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
# 3. staged context: exactly what env.Dockerfile copies, plus the wheelhouse
(cd "$ROOT" && tar --exclude=__pycache__ --exclude='*.pyc' --exclude=docker/wheelhouse -cf - \
    pyproject.toml README.md contract env_client env_server sandbox trainer_client verifier docker) | tar -C "$ctx" -xf -
mkdir -p "$ctx/docker/wheelhouse"
cp "$deps_dir"/*.whl "$ctx/docker/wheelhouse/"
log "building the project wheel"
# from the staged copy, so setuptools' build/ and egg-info never land in the checkout
if ! "$PYTHON" -m pip wheel -q --no-deps --no-build-isolation --wheel-dir "$ctx/docker/wheelhouse" "$ctx" \
        >"$ctx/wheel.log" 2>&1; then
    tail -n 30 "$ctx/wheel.log" >&2; exit 1
fi
log "building $ENV_IMAGE from $BASE_IMAGE ($inputs)"
start=$(date +%s)
if ! docker build -t "$ENV_IMAGE" -f "$ctx/docker/env.Dockerfile" --label "$LABEL=$inputs" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" "$ctx" >"$ctx/build.log" 2>&1; then
    tail -n 40 "$ctx/build.log" >&2; exit 1
fi
log "built $ENV_IMAGE in $(( $(date +%s) - start ))s"
echo "$ENV_IMAGE"
