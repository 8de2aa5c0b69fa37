#!/bin/sh
# Entry point of the env-server image: `env-server serve` on 0.0.0.0:$ENV_PORT.
#
#   ENV_TASKS         task file (JSON/JSONL) inside the container (required)
#   ENV_BACKEND       bwrap (default) | docker
#   ENV_MAX_SESSIONS  live sessions per replica (default 16)
#   ENV_DATA_DIR      traces go to $ENV_DATA_DIR/<hostname>/ (one folder per replica,
#                     so replicas can share one volume without clashing)
#   ENV_PORT          default 8000
# Arguments are passed on to `env-server serve` (e.g. --max-steps 50).
set -eu

: "${ENV_TASKS:?set ENV_TASKS to the task file (mounted into the container)}"
backend=${ENV_BACKEND:-bwrap}
data_dir=${ENV_DATA_DIR:-/data}/$(hostname)

if [ "$backend" = bwrap ]; then
    # Fail fast, with the fix, when the container may not create namespaces.
    if ! err=$(bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev true 2>&1); then
        echo "env-entrypoint: bwrap cannot create a sandbox in this container: $err" >&2
        echo "env-entrypoint: run it with security_opt [seccomp=unconfined, systempaths=unconfined]" \
             "(docker run --security-opt seccomp=unconfined --security-opt systempaths=unconfined)," \
             "or use ENV_BACKEND=docker with the engine socket (docs/deploy.md)" >&2
        exit 3
    fi
fi

mkdir -p "$data_dir"
exec env-server serve --host 0.0.0.0 --port "${ENV_PORT:-8000}" --tasks "$ENV_TASKS" \
    --backend "$backend" --max-sessions "${ENV_MAX_SESSIONS:-16}" --data-dir "$data_dir" \
    --log-level "${ENV_LOG_LEVEL:-warning}" "$@"
