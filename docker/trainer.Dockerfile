# The trainer image (GPU): trainer_client with the `train` and `vllm` extras. PyPI's Linux
# torch/vLLM wheels carry their CUDA runtime; the host's NVIDIA driver comes in through the
# NVIDIA container toolkit (compose: deploy.resources.reservations.devices; Kubernetes:
# nvidia.com/gpu limits). Build with a registry and PyPI, from the repository root:
#     docker build -f docker/trainer.Dockerfile -t swe-openenv-trainer:latest .
# EXTRAS=train builds it without vLLM (colocated HF generation only).
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}
ARG EXTRAS=train,vllm
ENV DEBIAN_FRONTEND=noninteractive PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/trainer/bin:$PATH HF_HUB_DISABLE_TELEMETRY=1
SHELL ["/bin/bash", "-euo", "pipefail", "-c"]
RUN apt-get update -qq; \
    apt-get install -y -qq --no-install-recommends git ca-certificates python3-venv >/dev/null; \
    apt-get clean; rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md /src/
COPY env_server /src/env_server
COPY sandbox /src/sandbox
COPY trainer_client /src/trainer_client
RUN python3 -m venv /opt/trainer; \
    pip install -q --no-cache-dir "/src[${EXTRAS}]"; \
    mkdir -p /app/configs; cp -r /src/trainer_client/configs/. /app/configs/; rm -rf /src
WORKDIR /app
# e.g. trainer-client train --config configs/gpu_qwen.yaml --env-url http://env-a:8000 --tasks /tasks/tasks.jsonl
# multi-GPU: accelerate launch --num_processes 4 -m trainer_client.cli train --config ...
CMD ["trainer-client", "--help"]
