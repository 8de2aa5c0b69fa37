#!/bin/sh
# Entry point of the env-server image: `env-server serve` on 0.0.0.0:$ENV_PORT.
#
#   ENV_TASKS         task file (JSON/JSONL) inside the container (required)
#   ENV_BACKEND       bwrap (default) | docker
#   ENV_MAX_SESSIONS  live sessions per replica (default 16)
#   ENV_DATA_DIR      traces go to $ENV_DATA_DIR/<replica name>/traces/ (default /data; one
#                     folder per replica, so replicas can share one volume without clashing)
#   ENV_REPLICA_NAME  that folder's name; default: the container's name under compose (what
#                     `docker compose ps` shows: <project>-env-<N>, v1 <project>_env_<N>), else
#                     the host name (a pod's name on Kubernetes): env_server/replica.py
#   ENV_PORT          default 8000
#   ENV_UID, ENV_GID  the uid/gid the server runs as when started as root (default 10001)
# Arguments are passed on to `env-server serve` (e.g. --max-steps 50).
#
# Started as root (compose.yaml, deploy/): the bwrap sandbox mounts a fresh /proc in its
# own user namespace, which the kernel refuses while Docker's masks (mounts over
# /proc/kcore, /proc/sys, ...) cover the container's /proc. `docker run --security-opt
# systempaths=unconfined` removes them, but docker-compose v1 and the engine API cannot
# pass that option, so with CAP_SYS_ADMIN we unmount them here, then drop to ENV_UID
# with no capabilities at all (CAP_SETPCAP empties the bounding set; without it setpriv
# fails) and no_new_privs, and start over.
# Started as a non-root user: nothing of this; the container must already allow it.
set -eu

if [ "$(id -u)" = 0 ]; then
    if [ "${ENV_BACKEND:-bwrap}" = bwrap ]; then
        # deepest first; a mask that cannot be unmounted leaves the preflight below to report
        awk '$5 ~ "^/proc/" {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
            umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
        done
    fi
    drop="setpriv --reuid ${ENV_UID:-10001} --regid ${ENV_GID:-10001} --clear-groups --inh-caps=-all --bounding-set=-all --no-new-privs"
    # setpriv leaves the bounding set as it is, silently, without CAP_SETPCAP: check it
    if ! $drop -- grep -Eq '^CapBnd:[[:space:]]+0+$' /proc/self/status; then
        echo "env-entrypoint: cannot drop all capabilities (cap_add SETPCAP, SETUID, SETGID)" >&2
        exit 3
    fi
    exec $drop -- "$0" "$@"
fi

: "${ENV_TASKS:?set ENV_TASKS to the task file (mounted into the container)}"
backend=${ENV_BACKEND:-bwrap}
replica=$(python3 -m env_server.replica)
data_dir=${ENV_DATA_DIR:-/data}/$replica

if [ "$backend" = bwrap ]; then
    # Fail fast, with the fix, when the container may not create the sandbox's namespaces.
    if ! err=$(bwrap --unshare-all --die-with-parent --ro-bind / / --proc /proc --dev /dev true 2>&1); then
        echo "env-entrypoint: bwrap cannot create a sandbox in this container: $err" >&2
        echo "env-entrypoint: start it as root with cap_add [SYS_ADMIN, SETUID, SETGID] and" \
             "security_opt [seccomp=unconfined] (compose.yaml), or as non-root with" \
             "--security-opt seccomp=unconfined --security-opt systempaths=unconfined;" \
             "or use ENV_BACKEND=docker with the engine socket (docs/deploy.md)" >&2
        exit 3
    fi
fi

mkdir -p "$data_dir"
# tini (PID 1 here, non-root like everything else by now) reaps and forwards signals.
exec tini -s -- env-server serve --host 0.0.0.0 --port "${ENV_PORT:-8000}" --tasks "$ENV_TASKS" \
    --backend "$backend" --max-sessions "${ENV_MAX_SESSIONS:-16}" --data-dir "$data_dir" \
    --log-level "${ENV_LOG_LEVEL:-warning}" "$@"
