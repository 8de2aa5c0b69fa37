# Shared settings and steps of the offline image builds, sourced by build-env-image.sh and
# build-trainer-image.sh after they set HERE and log(); they set BASE_IMAGE afterwards.

ROOT=$(dirname "$HERE")
OFFLINE_BASE=${SWE_BASE_IMAGE:-swe-openenv-base:bookworm}
WHEEL_CACHE=${SWE_WHEEL_CACHE:-$ROOT/.cache/wheelhouse}
LABEL=org.swe-openenv.build-inputs
if [ -z "${PYTHON:-}" ]; then
    if [ -x "$ROOT/.venv/bin/python" ]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi
docker info >/dev/null 2>&1 || { log "no Docker engine answers; run docker/setup-engine.sh first"; exit 1; }

# Hash of the project sources that go into an image, plus the given repo-relative files.
sources_hash() {
    "$PYTHON" - "$ROOT" "$@" <<'PY'
import hashlib, os, sys
root, extra = sys.argv[1], sys.argv[2:]
h = hashlib.sha256()
paths = ["pyproject.toml", "README.md", *extra]
for top in ("contract", "env_client", "env_server", "evaluation", "sandbox", "trainer_client", "verifier"):
    for d, dirs, files in os.walk(os.path.join(root, top)):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        paths += [os.path.relpath(os.path.join(d, f), root) for f in sorted(files) if not f.endswith((".pyc", ".pyo"))]
for rel in paths:
    h.update(rel.encode() + b"\0")
    with open(os.path.join(root, rel), "rb") as f:
        h.update(hashlib.sha256(f.read()).digest())
print(h.hexdigest()[:16])
PY
}

# The base image's id; builds the offline Debian base first when that is the base asked for.
# $1: the variable a user sets to choose another base (for the error message).
base_image_id() {
    if [ "$BASE_IMAGE" = "$OFFLINE_BASE" ]; then
        SWE_BASE_IMAGE=$OFFLINE_BASE "$HERE/build-images.sh" base
    fi
    docker image inspect --format '{{.Id}}' "$BASE_IMAGE" 2>/dev/null \
        || { log "base image $BASE_IMAGE is missing (pull it, or leave $1 unset to build it offline)"; return 1; }
}

# Download binary wheels of $requirements for CPython 3.11 on this architecture (whatever the
# host python is) into $1, with this machine's pip configuration. Returns non-zero on failure.
download_wheels() {
    local dest=$1 arch
    arch=$(uname -m)
    rm -rf "$dest"; mkdir -p "$dest"
    echo "$requirements" >"$dest/requirements.txt"
    if ! "$PYTHON" -m pip download -q --dest "$dest" --only-binary=:all: \
        --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
        --platform "manylinux_2_17_$arch" --platform "manylinux2014_$arch" --platform "manylinux_2_28_$arch" \
        --platform any -r "$dest/requirements.txt" >"$dest/.log" 2>&1; then
        tail -n 30 "$dest/.log" >&2
        return 1
    fi
}
