# The trainer image: trainer_client with the `train` extra, plus `vllm` for the GPU variant.
#
# GPU variant (the default; a registry and PyPI needed), from the repository root:
#     docker build -f docker/trainer.Dockerfile -t swe-openenv-trainer:latest .
# PyPI's Linux torch/vLLM wheels carry their CUDA runtime; the host's NVIDIA driver comes in
# through the NVIDIA container toolkit (compose: deploy.resources.reservations.devices;
# Kubernetes: nvidia.com/gpu limits). EXTRAS=train builds it without vLLM (colocated HF
# generation only).
#
# CPU variant (no registry, no PyPI inside the build): docker/build-trainer-image.sh builds
# it on the offline Debian base with EXTRAS=train VARIANT=cpu and a wheelhouse made on the
# host in docker/wheelhouse/ of the build context (CPU torch; pip installs with --no-index).
# It runs configs/cpu_smoke.yaml (tiny random Qwen2, offline Qwen2 tokenizer) anywhere.
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE} AS os
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1 PATH=/opt/trainer/bin:$PATH HF_HUB_DISABLE_TELEMETRY=1 \
    TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
# python3 + python3-venv: Debian's 3.11 (the offline base has no python of its own; on
# python:3.11-slim the venv below uses the image's /usr/local python, first on PATH).
RUN apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends git ca-certificates python3 python3-venv >/dev/null; \
    apt-get clean; rm -rf /var/lib/apt/lists/* /usr/share/doc/* /usr/share/man/* /usr/share/info/*

# Offline builds: the dependencies from the wheelhouse, in a stage of their own so that the
# wheelhouse never becomes a layer of the image and a source change does not reinstall them.
FROM os AS deps
COPY docker /src/docker
RUN python3 -m venv /opt/trainer; \
    if [ -f /src/docker/wheelhouse/requirements.txt ]; then \
        pip install -q --no-cache-dir --no-index --find-links /src/docker/wheelhouse \
            -r /src/docker/wheelhouse/requirements.txt; \
        touch /opt/trainer/.offline-deps; \
    fi

FROM os
ARG EXTRAS=train,vllm
# gpu | cpu: cpu refuses a CUDA torch and any vLLM, and prebuilds the smoke model
ARG VARIANT=gpu
COPY --from=deps /opt/trainer /opt/trainer
# Only what the package needs (a build from the repository root must not send .venv).
COPY pyproject.toml README.md /src/
COPY contract /src/contract
COPY env_client /src/env_client
COPY env_server /src/env_server
COPY evaluation /src/evaluation
COPY sandbox /src/sandbox
COPY verifier /src/verifier
COPY trainer_client /src/trainer_client
# The offline Qwen2 tokenizer and the tiny smoke model are built once into a world-readable
# cache (CPU variant; the GPU variant builds them on first use under $SWE_OPENENV_CACHE).
ENV SWE_OPENENV_CACHE=/opt/swe-openenv-cache
RUN if [ -f /opt/trainer/.offline-deps ]; then \
        pip install -q --no-cache-dir --no-index --no-build-isolation "/src[${EXTRAS}]"; \
    else \
        pip install -q --no-cache-dir "/src[${EXTRAS}]"; \
    fi; \
    if [ "$VARIANT" = cpu ]; then \
        python3 -c 'import torch, sys; sys.exit("CUDA torch in the CPU image: %s" % torch.__version__ if torch.version.cuda else 0)'; \
        if python3 -c 'import vllm' 2>/dev/null; then echo 'vllm must not be in the CPU image' >&2; exit 1; fi; \
        python3 -c 'from trainer_client.tiny_qwen import tiny_qwen_dir; print(tiny_qwen_dir())'; \
        chmod -R a+rX "$SWE_OPENENV_CACHE"; \
    fi; \
    mkdir -p /app/configs; cp -r /src/trainer_client/configs/. /app/configs/; rm -rf /src
WORKDIR /app
# e.g. trainer-client train --config configs/gpu_qwen.yaml --env-url http://env-a:8000 --tasks /tasks/tasks.jsonl
# multi-GPU: accelerate launch --num_processes 4 -m trainer_client.cli train --config ...
CMD ["trainer-client", "--help"]
