#!/usr/bin/env bash
# Build the CPU trainer image (docker/trainer.Dockerfile, VARIANT=cpu, EXTRAS=train: no
# vLLM, CPU torch) without a registry. Cached. Same recipe as docker/build-env-image.sh:
#
#  1. base image: $SWE_TRAINER_BASE_IMAGE, default the offline Debian bookworm minbase of
#     docker/build-images.sh (`build-images.sh base`); any other value is used as it is;
#  2. wheelhouse: the core and `train` dependencies, downloaded ON THE HOST with this
#     machine's pip configuration into $SWE_WHEEL_CACHE/trainer-deps-<hash>/ (kept: later
#     builds need no network), the project itself is installed from its sources. torch must come
#     out as a CPU build (`+cpu`, no nvidia-* wheels): point pip at a CPU torch (its
#     find-links / extra index config, or PIP_* variables) if it does not;
#  3. `docker build` of a staged context, skipped when $SWE_TRAINER_IMAGE carries the same
#     build-inputs label.
#
# Needs a running engine (docker/setup-engine.sh) and a host python3 >= 3.11 with pip.
# Run from anywhere. Prints the image name on stdout. The GPU image is not built here
# (it needs PyPI's CUDA wheels): see docker/trainer.Dockerfile.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { echo "[build-trainer-image] $*" >&2; }
# ROOT, OFFLINE_BASE, WHEEL_CACHE, LABEL and PYTHON; exits when no engine answers
# shellcheck source=docker/image-lib.sh
. "$HERE/image-lib.sh"
BASE_IMAGE=${SWE_TRAINER_BASE_IMAGE:-$OFFLINE_BASE}
TRAINER_IMAGE=${SWE_TRAINER_IMAGE:-swe-openenv-trainer:cpu}
RECIPE=1  # bump when this script's build steps change

# The core and `train` requirements and the build backend (the project is installed from
# its sources without build isolation), read from pyproject.toml (one per line).
requirements=$("$PYTHON" - "$ROOT/pyproject.toml" <<'PY'
import sys, tomllib
meta = tomllib.load(open(sys.argv[1], "rb"))
project = meta["project"]
print("\n".join(meta["build-system"]["requires"] + project["dependencies"] + project["optional-dependencies"]["train"]))
PY
)


# 1. base
base_id=$(base_image_id SWE_TRAINER_BASE_IMAGE) || exit 1

inputs=$( { echo "$RECIPE"; echo "$base_id"; echo "$requirements"; sources_hash "docker/trainer.Dockerfile"; } | sha256sum | cut -c1-16)
current=$(docker image inspect --format "{{ index .Config.Labels \"$LABEL\" }}" "$TRAINER_IMAGE" 2>/dev/null || true)
if [ "$current" = "$inputs" ]; then
    log "trainer image $TRAINER_IMAGE up to date ($inputs)"
    echo "$TRAINER_IMAGE"
    exit 0
fi

# 2. wheelhouse (dependencies cached by their requirement set)
deps_key=$( { echo "$requirements"; uname -m; } | sha256sum | cut -c1-12)
deps_dir=$WHEEL_CACHE/trainer-deps-$deps_key
if [ ! -f "$deps_dir/.complete" ]; then
    log "downloading wheels of the train extra into $deps_dir (host network)"
    download_wheels "$deps_dir" || exit 1
    # CPU only: a CUDA torch (several GB of nvidia-* wheels) has no place in this image.
    torch_whl=$(cd "$deps_dir" && ls torch-*.whl 2>/dev/null || true)
    cuda_whls=$(cd "$deps_dir" && ls nvidia_*.whl triton-*.whl 2>/dev/null || true)
    if [[ "$torch_whl" != *+cpu-* ]] || [ -n "$cuda_whls" ]; then
        log "pip resolved a CUDA torch ($torch_whl${cuda_whls:+; $(echo $cuda_whls | wc -w) CUDA wheels}):"
        log "configure pip with a CPU torch source (find-links / extra index), then run this again"
        rm -rf "$deps_dir"; exit 1
    fi
    touch "$deps_dir/.complete"
    # older requirement sets' wheelhouses (~330 MB each) are not needed any more
    find "$WHEEL_CACHE" -mindepth 1 -maxdepth 1 -name 'trainer-deps-*' ! -name "trainer-deps-$deps_key" \
        -exec rm -rf {} +
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/swe-trainer-ctx.XXXXXX")
trap 'rm -rf "$ctx"' EXIT
# 3. staged context: exactly what trainer.Dockerfile copies; docker/ holds the wheelhouse
#    only (its layer is cached while the requirements stay the same)
(cd "$ROOT" && tar --exclude=__pycache__ --exclude='*.pyc' -cf - \
    pyproject.toml README.md contract env_client env_server evaluation sandbox trainer_client verifier) | tar -C "$ctx" -xf -
cp "$HERE/trainer.Dockerfile" "$ctx/trainer.Dockerfile"
mkdir -p "$ctx/docker/wheelhouse"
# hard links when the cache is on the same file system (the wheels are ~330 MB)
ln "$deps_dir"/*.whl "$ctx/docker/wheelhouse/" 2>/dev/null || cp "$deps_dir"/*.whl "$ctx/docker/wheelhouse/"
cp "$deps_dir/requirements.txt" "$ctx/docker/wheelhouse/requirements.txt"
log "building $TRAINER_IMAGE from $BASE_IMAGE ($inputs)"
start=$(date +%s)
if ! docker build -t "$TRAINER_IMAGE" -f "$ctx/trainer.Dockerfile" --label "$LABEL=$inputs" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg EXTRAS=train --build-arg VARIANT=cpu \
        "$ctx" >"$ctx/build.log" 2>&1; then
    tail -n 40 "$ctx/build.log" >&2; exit 1
fi
log "built $TRAINER_IMAGE in $(( $(date +%s) - start ))s"
echo "$TRAINER_IMAGE"
