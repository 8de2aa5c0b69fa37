# The env-server image: env_server, verifier, contract and sandbox (the `env` extra: no torch; no task factory), bwrap for the
# sandbox, uvicorn on 0.0.0.0:8000, HEALTHCHECK on /health, non-root.
#
# With a registry, from the repository root:
#     docker build -f docker/env.Dockerfile -t swe-openenv-env:latest .
# Without one (no pull, no PyPI inside containers): docker/build-env-image.sh builds
# BASE_IMAGE offline (debootstrap + docker import) and puts a wheelhouse made on the
# host into docker/wheelhouse/ of the build context; pip then installs with --no-index.
#
# Debian bookworm either way: the task venvs' interpreter is Debian's /usr/bin/python3.11
# (apt `python3` below), so task packs built on a bookworm host run unchanged in here.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG ENV_UID=10001
ENV DEBIAN_FRONTEND=noninteractive \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/env-server/bin:$PATH

SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
# bubblewrap: the sandbox; git: workspace templates; python3 (Debian's 3.11): the task
# venvs' base interpreter and, on the offline base, the server's; tini: PID 1 reaper.
RUN apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends \
        bubblewrap git python3 python3-venv ca-certificates tini >/dev/null; \
    apt-get clean; rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/*; \
    groupadd -g "$ENV_UID" envsrv; \
    useradd -u "$ENV_UID" -g "$ENV_UID" -m -d /home/envsrv -s /usr/sbin/nologin envsrv; \
    mkdir -p /data /cache /app; chown "$ENV_UID:$ENV_UID" /data /cache; chmod 1777 /data /cache

# Only what the package needs (a build from the repository root must not send .venv).
COPY pyproject.toml README.md /src/
COPY contract /src/contract
COPY env_client /src/env_client
COPY env_server /src/env_server
COPY sandbox /src/sandbox
COPY verifier /src/verifier
COPY trainer_client /src/trainer_client
COPY docker /src/docker
RUN python3 -m venv /opt/env-server; \
    if compgen -G '/src/docker/wheelhouse/*.whl' >/dev/null; then \
        pip install -q --no-cache-dir --no-index --find-links /src/docker/wheelhouse 'swe-openenv[env,datasets]'; \
    else \
        pip install -q --no-cache-dir '/src[env,datasets]'; \
    fi; \
    if python3 -c 'import torch' 2>/dev/null; then echo 'torch must not be in the env image' >&2; exit 1; fi; \
    install -m 0644 /src/docker/openenv.yaml /app/openenv.yaml; \
    install -m 0755 /src/docker/env-entrypoint.sh /app/env-entrypoint.sh; \
    rm -rf /src

# Non-root by default. compose.yaml and deploy/ start it as root with CAP_SYS_ADMIN only
# to unmask /proc for the sandbox; the entry point then drops to ENV_UID with no
# capabilities (docker/env-entrypoint.sh).
USER ${ENV_UID}:${ENV_UID}
WORKDIR /app
# Templates and tool views (per container; not shared between replicas).
ENV XDG_CACHE_HOME=/cache \
    ENV_UID=${ENV_UID} \
    ENV_GID=${ENV_UID} \
    ENV_DATA_DIR=/data \
    ENV_PORT=8000
# /data: mount a volume there for traces (compose.yaml: named volume `traces`). No
# VOLUME instruction: it would leave an anonymous volume behind every `docker run`.
EXPOSE 8000
HEALTHCHECK --interval=3s --timeout=3s --start-period=20s --retries=5 \
    CMD ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--", "python3", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('ENV_PORT', '8000'), timeout=2).read()"]
ENTRYPOINT ["/app/env-entrypoint.sh"]
CMD []
